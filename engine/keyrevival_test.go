package engine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestFarWriterRevivalKeepsKeysApart races, on keys of one shard, writers
// at the present against writers 2^22 sub-windows later (far enough that
// each retires the key's ring and replaces it, a revival), while sweeps run
// and other keys of the shard are decided at the present. Each admission is
// recorded at one of two instants, the present's sub-window or the far
// one's (a present writer that meets the replacement is clamped forward to
// it): each holds at most the key's own limit, and afterwards the key's
// Remaining is its limit less exactly the units recorded far. The other
// keys match their exact model throughout.
func TestFarWriterRevivalKeepsKeysApart(t *testing.T) {
	const (
		W      = time.Second
		N      = 10
		w      = W / N
		far    = (1 << 22) * w
		nRace  = 64
		nOther = 256
	)
	rounds := 8
	if raceOn {
		rounds = 3
	}
	for r := range rounds {
		var race, other []string
		limits := map[string]int64{}
		for i := range nRace {
			k := fmt.Sprintf("race-%d-%03d", r, i)
			race, limits[k] = append(race, k), int64(3+i)
		}
		for i := range nOther {
			k := fmt.Sprintf("other-%d-%03d", r, i)
			other, limits[k] = append(other, k), int64(100+i)
		}
		present := t0.Add(time.Duration(r) * 3 * time.Hour)
		clk := engine.NewManualClock(present)
		e := newEngine(t, engine.Config{
			Limit: 1, Window: W, SubWindows: N, Algorithm: engine.SlidingWindowStrict,
			Clock: clk, Shards: 1, SweepInterval: time.Hour, LookupCache: true,
			KeyLimit: func(k string) int64 { return limits[k] },
		})
		for _, k := range race { // each key holds one unit at the present
			if d := e.AllowAt(k, 1, present); !d.Allowed {
				t.Fatalf("%s: %+v", k, d)
			}
		}
		type tally struct{ present, far []int64 }
		tallies := make([]tally, 4)
		errs := make(chan error, 8)
		stop := make(chan struct{})
		var wg, sweeper sync.WaitGroup
		sweeper.Add(1)
		go func() {
			defer sweeper.Done()
			for {
				select {
				case <-stop:
					return
				default:
					e.Sweep()
				}
			}
		}()
		for g := range 4 {
			tallies[g] = tally{make([]int64, nRace), make([]int64, nRace)}
			at := present
			if g%2 == 1 {
				at = present.Add(far)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for pass := range 6 {
					for i, k := range race {
						res := e.ReserveAt(k, 1, at)
						d := res.Decision()
						if d.Limit != limits[k] {
							errs <- fmt.Errorf("%s: pass %d at %v: limit %d, want its own %d", k, pass, at.Sub(present), d.Limit, limits[k])
							return
						}
						if !d.Allowed {
							continue
						}
						switch {
						case res.At().Equal(present):
							tallies[g].present[i]++
						case res.At().Equal(present.Add(far)):
							tallies[g].far[i]++
						default:
							errs <- fmt.Errorf("%s: recorded at %v, neither the present nor the far sub-window", k, res.At().Sub(present))
							return
						}
					}
				}
			}()
		}
		wg.Add(1)
		go func() { // the shard's other keys, at the present, exact
			defer wg.Done()
			for _, k := range other {
				for j := range 3 {
					n := limits[k] / 4
					d := e.AllowAt(k, n, present)
					if want := (engine.Decision{Allowed: true, Limit: limits[k], Remaining: limits[k] - int64(j+1)*n}); d != want {
						errs <- fmt.Errorf("%s: request %d gave %+v, want %+v", k, j, d, want)
						return
					}
				}
			}
		}()
		wg.Wait()
		close(stop)
		sweeper.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", r, err)
		}
		revived := 0
		for i, k := range race {
			p, f := int64(1), int64(0) // the unit recorded before the race
			for _, tl := range tallies {
				p, f = p+tl.present[i], f+tl.far[i]
			}
			if p > limits[k] || f > limits[k] {
				t.Fatalf("round %d: %s (limit %d): %d units at the present, %d far: more than the limit in one window", r, k, limits[k], p, f)
			}
			if f > 0 {
				revived++
			}
			for _, at := range []time.Time{present, present.Add(far)} {
				d := e.AllowAt(k, 0, at)
				if want := (engine.Decision{Allowed: true, Limit: limits[k], Remaining: limits[k] - f}); d != want {
					t.Fatalf("round %d: %s: peek at %v gave %+v, want %+v (%d units recorded far, %d at the present)", r, k, at.Sub(present), d, want, f, p)
				}
			}
		}
		if revived != nRace {
			t.Fatalf("round %d: %d of %d keys were revived by the far writers", r, revived, nRace)
		}
	}
}
