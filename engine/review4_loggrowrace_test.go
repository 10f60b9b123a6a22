package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Cancels on a SlidingLog key while UpdateLimits / SetLimit keep moving its
// log into larger allocations. Every reservation is cancelled exactly
// once; the final log must hold exactly the units whose Cancel said false
// (none should: the key's window never moves).
func TestReview4LogCancelRacingGrowth(t *testing.T) {
	for round := 0; round < 30; round++ {
		for _, viaUpdate := range []bool{false, true} {
			e := new13(t, engine.Config{Limit: 4, Window: time.Hour, Algorithm: engine.SlidingLog, PerKeyLimits: true, DisableEviction: true, MaxLogLimit: 1 << 20})
			const G, R = 4, 200
			res := make([][]engine.Reservation, G)
			var wg sync.WaitGroup
			var lim int64 = 4
			var mu sync.Mutex
			wg.Add(1)
			go func() {
				defer wg.Done()
				for l := int64(8); l <= 4096; l *= 2 {
					var err error
					if viaUpdate {
						err = e.UpdateLimits(func(string, int64) int64 { return l })
					} else {
						err = e.SetLimitAt("k", l, t13)
					}
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					lim = l
					mu.Unlock()
					time.Sleep(50 * time.Microsecond)
				}
			}()
			var kept, admitted int64
			var km sync.Mutex
			for g := 0; g < G; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := 0; i < R; i++ {
						res[g] = append(res[g], e.ReserveAt("k", 1, t13))
						r := &res[g][len(res[g])-1]
						if r.Units() == 0 {
							continue
						}
						ok := r.Cancel()
						km.Lock()
						admitted++
						if !ok {
							kept++
						}
						km.Unlock()
					}
				}(g)
			}
			wg.Wait()
			rem := e.AllowAt("k", 0, t13).Remaining
			if lim-rem != kept || kept != 0 {
				t.Fatalf("round %d update=%v: log holds %d units, Cancel false for %d (admitted %d)", round, viaUpdate, lim-rem, kept, admitted)
			}
		}
	}
}
