package engine_test

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A SlidingLog key whose log SetLimit keeps moving into larger allocations
// while goroutines reserve, cancel and AllowAll on it: the audit must
// report no false admit and no window above the limit (limits only rise),
// and every Cancel that returned true must have freed exactly its units.
func TestReview5AuditLogMoveWhileCancelling(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindowStrict} {
		for round := 0; round < scaled(1, 4); round++ {
			t.Run(fmt.Sprint(alg, round), func(t *testing.T) {
				e := advNew(t, engine.Config{Limit: 20, Window: 100 * time.Millisecond, SubWindows: 5, Algorithm: alg, Audit: 1, PerKeyLimits: true, DisableEviction: true, MaxLogLimit: 1 << 16, AuditBuffer: 1 << 20})
				var clk atomic.Int64
				clk.Store(advT0.UnixNano())
				now := func() time.Time { return time.Unix(0, clk.Load()) }
				var wg sync.WaitGroup
				stop := make(chan struct{})
				for g := 0; g < 4; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						rng := rand.New(rand.NewSource(int64(g + round*10)))
						var held []*engine.Reservation
						for i := 0; i < 3000; i++ {
							if g == 0 {
								clk.Add(int64(rng.Intn(200_000)))
							}
							switch rng.Intn(5) {
							case 0, 1:
								r := new(engine.Reservation)
								*r = e.ReserveAt("k", int64(1+rng.Intn(3)), now())
								if r.Decision().Allowed {
									held = append(held, r)
								}
							case 2:
								if len(held) > 0 {
									j := rng.Intn(len(held))
									held[j].Cancel()
									held = append(held[:j], held[j+1:]...)
								}
							case 3:
								engine.AllowAll(now(), engine.Request{Engine: e, Key: "k", N: 1}, engine.Request{Engine: e, Key: "k", N: int64(1 + rng.Intn(4))})
							case 4:
								e.AllowAt("k", 1, now())
							}
						}
					}(g)
				}
				var sw sync.WaitGroup
				sw.Add(1)
				go func() {
					defer sw.Done()
					lim := int64(20)
					for lim < 4000 {
						select {
						case <-stop:
							return
						default:
						}
						lim += 1 + lim/50
						if err := e.SetLimitAt("k", lim, now()); err != nil {
							t.Error(err)
							return
						}
						time.Sleep(200 * time.Microsecond)
					}
				}()
				wg.Wait()
				close(stop)
				sw.Wait()
				r := e.Audit()
				t.Logf("%+v", r)
				advConsistent(t, r)
				if r.FalseAdmits != 0 || r.WorstWindow > 1 {
					t.Errorf("false admits under log moves: %+v", r)
				}
			})
		}
	}
}
