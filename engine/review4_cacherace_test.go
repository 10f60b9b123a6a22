package engine_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Cancel racing with the first writer of the next sub-window (which walks
// the slots and caches the settled counts). Once both are done, a
// sequential peek must be exact: "In a sequential run it is exact".
func TestReview4CancelRacingWalk(t *testing.T) {
	iters := 20000
	if raceOn13 {
		iters = 3000
	}
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict} {
		for _, N := range []int{1, 2} {
			const L = 10
			w := time.Second
			e := new13(t, engine.Config{Limit: L, Window: w * time.Duration(N), SubWindows: N, Algorithm: alg, DisableEviction: true})
			bad := 0
			for i := 0; i < iters; i++ {
				key := fmt.Sprint("k", i)
				r := e.ReserveAt(key, 4, t13)
				var ok, adm bool
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); ok = r.Cancel() }()
				go func() {
					defer wg.Done()
					runtime.Gosched()
					adm = e.AllowAt(key, 1, t13.Add(w)).Allowed
				}()
				wg.Wait()
				var want int64 = L
				if adm {
					want--
				}
				if !ok {
					want -= 4
				}
				// At t13+w: strict counts e in full; weighted (N sub-windows
				// back = e when N = 1) counts it fully at the boundary too.
				if got := e.AllowAt(key, 0, t13.Add(w)).Remaining; got != want {
					bad++
					if bad < 4 {
						t.Errorf("%v N=%d iter %d: cancel %v admit %v: sequential peek Remaining %d, exact %d", alg, N, i, ok, adm, got, want)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%v N=%d: %d/%d inexact", alg, N, bad, iters)
			}
		}
	}
}
