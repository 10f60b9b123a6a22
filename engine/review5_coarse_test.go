package engine_test

import (
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Real time, CoarseClock (many decisions at one instant), goroutines that
// Reserve, Cancel (some twice, some concurrently), AllowAll and Allow on a
// few hot keys, with a tiny AuditBuffer (drops) and concurrent Audit
// calls: Strict and the log never report a false admit nor a window above
// 1, and the report stays consistent.
func TestReview5AuditCoarseConcurrent(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		for _, buf := range []int{64, 1 << 14} {
			t.Run(fmt.Sprint(alg, buf), func(t *testing.T) {
				e := advNew(t, engine.Config{Limit: 30, Window: 40 * time.Millisecond, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: buf, CoarseClock: 200 * time.Microsecond})
				keys := []string{"a", "b", "c"}
				var wg sync.WaitGroup
				deadline := time.Now().Add(700 * time.Millisecond)
				for g := 0; g < 5; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						rng := rand.New(rand.NewSource(int64(g)))
						var held []*engine.Reservation
						for time.Now().Before(deadline) {
							k := keys[rng.Intn(3)]
							switch rng.Intn(6) {
							case 0, 1:
								r := new(engine.Reservation)
								*r = e.Reserve(k, int64(1+rng.Intn(4)))
								if r.Decision().Allowed {
									held = append(held, r)
								}
							case 2:
								if len(held) > 0 {
									j := rng.Intn(len(held))
									r := held[j]
									held = append(held[:j], held[j+1:]...)
									if rng.Intn(3) == 0 {
										var cw sync.WaitGroup
										cw.Add(2)
										go func() { defer cw.Done(); r.Cancel() }()
										go func() { defer cw.Done(); r.Cancel() }()
										cw.Wait()
									} else {
										r.Cancel()
										r.Cancel()
									}
								}
							case 3:
								reqs := make([]engine.Request, 1+rng.Intn(11))
								for i := range reqs {
									reqs[i] = engine.Request{Engine: e, Key: keys[rng.Intn(3)], N: int64(1 + rng.Intn(3))}
								}
								engine.AllowAll(time.Now(), reqs...)
							case 4:
								e.AllowN(k, int64(1+rng.Intn(3)))
							case 5:
								if g == 0 {
									e.Audit()
								} else {
									e.Allow(k)
								}
							}
						}
					}(g)
				}
				wg.Wait()
				r := e.Audit()
				t.Logf("%+v", r)
				advConsistent(t, r)
				if r.FalseAdmits != 0 || r.WorstWindow > 1 {
					t.Errorf("%v: false admits %+v", alg, r)
				}
			})
		}
	}
}
