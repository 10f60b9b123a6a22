package engine_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Two reservations of 2 units at one instant (limit 4). Goroutines A and B
// cancel R1 concurrently (one wins), C cancels R2. The engine then holds 0
// of those units, and a sequential AllowAt of 4 is admitted. If the
// loser's unadmit took R2's units and C's unadmit then found nothing at
// that time, the loser's readmit puts 2 units back that nobody holds:
// the fill is judged a false admit (Strict, log), window 1.5.
func TestReview5AuditDoubleCancelInterleaved(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			e := advNew(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, DisableEviction: true, AuditBuffer: 1 << 20})
			iters := scaled(4000, 20000)
			if raceOn13 {
				iters = scaled(1500, 5000)
			}
			for i := 0; i < iters; i++ {
				key := fmt.Sprint("k", i%64)
				now := advT0.Add(time.Duration(i/64) * 3 * time.Second)
				var r1, r2 engine.Reservation
				r1 = e.ReserveAt(key, 2, now)
				r2 = e.ReserveAt(key, 2, now)
				if !r1.Decision().Allowed || !r2.Decision().Allowed {
					t.Fatalf("setup %d", i)
				}
				var wg sync.WaitGroup
				start := make(chan struct{})
				wg.Add(3)
				go func() { defer wg.Done(); <-start; r1.Cancel() }()
				go func() { defer wg.Done(); <-start; runtime.Gosched(); r1.Cancel() }()
				go func() { defer wg.Done(); <-start; r2.Cancel() }()
				close(start)
				wg.Wait()
				if d := e.AllowAt(key, 4, now); !d.Allowed {
					t.Fatalf("%d: fill refused %+v", i, d)
				}
				if i%1000 == 999 {
					if rep := e.Audit(); rep.FalseAdmits != 0 {
						t.Fatalf("after %d rounds: %+v", i+1, rep)
					}
				}
			}
			rep := e.Audit()
			t.Logf("%+v", rep)
			if rep.FalseAdmits != 0 || rep.WorstWindow > 1 {
				t.Errorf("%+v", rep)
			}
		})
	}
}
