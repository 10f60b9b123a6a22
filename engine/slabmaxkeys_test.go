package engine_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// MaxKeys at the slab's threshold: two goroutines race to create more keys
// than the cap while others decide on existing keys. Exactly MaxKeys keys
// are admitted, the rest refused as keys-full and left without state; the
// slab starts with the last key admitted (MaxKeys = threshold) or never
// (one below). A sweep that drops it and a refill to the cap start it
// again, and decisions on existing keys allocate nothing throughout.
func TestSlabThresholdAtMaxKeys(t *testing.T) {
	for _, maxKeys := range []int64{slabThreshold - 1, slabThreshold} {
		t.Run(strconv.FormatInt(maxKeys, 10), func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0)
			const lim = 30
			e, clk := newThresholdEngine(t, engine.Config{Limit: lim, MaxKeys: maxKeys}, t0)
			limit := func(string) int64 { return lim }
			keys := hotKeys("hot", 8)
			for _, k := range keys {
				e.AllowAt(k, 0, t0)
			}
			noAllocs := func(when string, at time.Time) {
				t.Helper()
				if raceOn {
					return // the race detector allocates
				}
				for _, k := range []string{keys[0], keys[1], "f7"} {
					if a := testing.AllocsPerRun(50, func() { e.AllowAt(k, 0, at) }); a != 0 {
						t.Errorf("%s: AllowAt(%s) allocates %v", when, k, a)
					}
				}
				if a := testing.AllocsPerRun(50, func() { e.AllowAt("absent", 1, at) }); a != 0 {
					t.Errorf("%s: a new key refused at MaxKeys allocates %v", when, a)
				}
			}

			// fill creates keys f0… from two goroutines at at (each
			// twice, in opposite orders) until the cap refuses the rest,
			// beside deciders on keys, and checks the count admitted.
			fill := func(at time.Time, present int64, tallies []*tally) {
				t.Helper()
				want := maxKeys - present
				total := int(want) + 500
				var made, full atomic.Int64
				stop := make(chan struct{})
				var deciders, creators sync.WaitGroup
				deciders.Add(1)
				go func() { defer deciders.Done(); decideHot(t, e, keys, tallies, limit, at, 0, stop) }()
				for w := range 2 {
					creators.Add(1)
					go func() {
						defer creators.Done()
						for j := range total {
							i := j
							if w == 1 {
								i = total - 1 - j
							}
							d := e.AllowAt("f"+strconv.Itoa(i), 1, at)
							switch {
							case d.Allowed:
								made.Add(1)
							case d.Reason() == engine.ReasonKeysFull:
								full.Add(1)
							default: // the other goroutine created it first, and its unit is in
								if d.Remaining != lim-2 && d.Remaining != lim-1 {
									t.Errorf("f%d: %+v", i, d)
								}
							}
						}
					}()
				}
				creators.Wait()
				close(stop)
				deciders.Wait()
				if got := e.Len(); got != maxKeys {
					t.Errorf("Len %d after filling, want MaxKeys %d", got, maxKeys)
				}
				// Each key admitted is made once by each goroutine that
				// got to it first or second; each key refused is refused
				// to both.
				if made.Load() < want || full.Load() < 2*int64(total)-2*want {
					t.Errorf("%d keys admitted (%d units), %d refusals, want %d keys, %d refusals", e.Len()-present, made.Load(), full.Load(), want, 2*(int64(total)-want))
				}
				if slabDrops && (e.SlabGen() != 0) != (maxKeys >= slabThreshold) {
					t.Errorf("MaxKeys %d: slab %#x at the cap", maxKeys, e.SlabGen())
				}
				settleHot(t, e, keys, tallies, limit, at)
				noAllocs("at the cap", at)
			}

			fill(t0, int64(len(keys)), newTallies(len(keys)))
			t1 := t0.Add(10 * time.Second)
			clk.Set(t1)
			tallies := newTallies(len(keys))
			for i, k := range keys {
				if !e.AllowAt(k, 1, t1).Allowed { // activity: the sweep keeps them
					t.Fatalf("%s refused at %v", k, t1)
				}
				tallies[i].admitted.Add(1)
			}
			if n := e.Sweep(); int64(n) != maxKeys-int64(len(keys)) {
				t.Fatalf("the sweep reclaimed %d keys, want %d", n, maxKeys-int64(len(keys)))
			}
			if slabDrops && e.SlabGen() != 0 {
				t.Fatalf("the sweep left %d keys, but the slabs were kept", e.Len())
			}
			noAllocs("after the drop", t1)
			fill(t1, int64(len(keys)), tallies)
		})
	}
}
