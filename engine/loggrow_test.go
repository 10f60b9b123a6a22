package engine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestLogGrowUnderDecisionsLosesNoUnit raises a SlidingLog key's limit
// past its log's capacity again and again (each raise moves the log into a
// larger ring, retiring the old one) while other goroutines admit units of
// the key and reserve and cancel units of it, all at one instant, and
// decide other keys of the shard. No unit is lost in a move and none is
// counted twice: afterwards the key's Remaining is its final limit less
// exactly the units admitted and not cancelled, and no Cancel of a unit
// admitted at that instant fails.
func TestLogGrowUnderDecisionsLosesNoUnit(t *testing.T) {
	const W = time.Second
	rounds := 6
	if raceOn {
		rounds = 2
	}
	for r := range rounds {
		now := t0.Add(time.Duration(r) * time.Hour)
		clk := engine.NewManualClock(now)
		e := newEngine(t, engine.Config{
			Limit: 10, Window: W, Algorithm: engine.SlidingLog, Clock: clk, Shards: 1,
			SweepInterval: time.Hour, PerKeyLimits: true, LookupCache: true,
		})
		keys := []string{"grow", "grow2", "g", ""}
		var admitted [4][4]int64 // [goroutine][key]
		var limits [4]int64
		errs := make(chan error, 16)
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 2000 {
					j := i % len(keys)
					if g == 2 { // reserve and take back
						res := e.ReserveAt(keys[j], 1, now)
						if res.Decision().Allowed && !res.Cancel() {
							errs <- fmt.Errorf("%q: Cancel at the key's instant failed", keys[j])
							return
						}
						continue
					}
					if d := e.AllowAt(keys[j], 1, now); d.Allowed {
						admitted[g][j]++
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j, k := range keys {
				for l := int64(20); l <= 2560; l *= 2 {
					if err := e.SetLimitAt(k, l, now); err != nil {
						errs <- err
						return
					}
					limits[j] = l
				}
			}
		}()
		wg.Add(1)
		go func() { // other keys of the shard: fresh, each with its own count
			defer wg.Done()
			for i := range 300 {
				k := fmt.Sprintf("other-%d", i)
				for j := range 5 {
					if d := e.AllowAt(k, 2, now); d != (engine.Decision{Allowed: true, Limit: 10, Remaining: 8 - 2*int64(j)}) {
						errs <- fmt.Errorf("%s: request %d gave %+v", k, j, d)
						return
					}
				}
			}
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", r, err)
		}
		for j, k := range keys {
			a := admitted[0][j] + admitted[1][j]
			d := e.AllowAt(k, 0, now)
			if a > limits[j] || d != (engine.Decision{Allowed: true, Limit: limits[j], Remaining: limits[j] - a}) {
				t.Fatalf("round %d: %q: %d units admitted, limit %d; peek gave %+v", r, k, a, limits[j], d)
			}
		}
	}
}
