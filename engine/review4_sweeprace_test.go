package engine_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Reserve+Cancel racing with Sweep reclaiming the key (idle since the
// previous phase). Within a phase every request is at the clock's now, so
// no unit of the phase may be lost, and a Cancel that returns true must
// have removed its units.
func TestReview4ReserveCancelRacingSweep(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		clk := engine.NewManualClock(t13)
		W := time.Second
		const L = 1000
		const K = 8
		e := new13(t, engine.Config{Limit: L, Window: W, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour})
		keys := make([]string, K)
		for i := range keys {
			keys[i] = fmt.Sprint("k", i)
		}
		var falses, trues atomic.Int64
		for phase := 0; phase < 150; phase++ {
			clk.Advance(3 * W)
			P := time.Unix(0, clk.UnixNano())
			var kept [K]atomic.Int64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			var sw sync.WaitGroup
			sw.Add(1)
			go func() {
				defer sw.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					e.Sweep()
				}
			}()
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(phase), uint64(g)))
					for i := 0; i < 30; i++ {
						k := rng.IntN(K)
						r := e.ReserveAt(keys[k], 1, P)
						if !r.Decision().Allowed {
							t.Errorf("denied")
							return
						}
						if rng.IntN(2) == 0 {
							if r.Cancel() {
								trues.Add(1)
							} else {
								falses.Add(1)
								kept[k].Add(1)
							}
						} else {
							kept[k].Add(1)
						}
					}
				}(g)
			}
			wg.Wait()
			close(stop)
			sw.Wait()
			for k := range keys {
				rem := e.AllowAt(keys[k], 0, P).Remaining
				if rem != L-kept[k].Load() {
					t.Fatalf("%v phase %d key %d: remaining %d, want %d (units kept %d)", alg, phase, k, rem, L-kept[k].Load(), kept[k].Load())
				}
			}
		}
		t.Logf("%v: cancels true %d false %d", alg, trues.Load(), falses.Load())
	}
}
