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

// Concurrent goroutines on a few sampled keys: AllowN, Reserve/Cancel,
// AllowAll, with concurrent Audit calls, a shared manual clock, with and
// without a tiny buffer. Strict and the log never admit falsely, and
// their worst window stays ≤ 1; the report is consistent.
func TestReview4AuditConcurrentMixed(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		for _, buf := range []int{64, 1 << 16} {
			for _, setLimits := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/buf=%d/setlimits=%v", alg, buf, setLimits), func(t *testing.T) {
					clk := engine.NewManualClock(advT0)
					e := advNew(t, engine.Config{Limit: 30, Window: 50 * time.Millisecond, SubWindows: 5, Algorithm: alg,
						Audit: 1, Clock: clk, DisableEviction: true, AuditBuffer: buf, PerKeyLimits: true})
					var issued, cancels atomic.Int64
					stop := make(chan struct{})
					var aw sync.WaitGroup
					var reports []engine.AuditReport
					aw.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
								r := e.Audit()
								if r.Decisions != r.Admits+r.Denies || r.Decisions != r.Judged+r.Unjudged {
									reports = append(reports, r)
								}
								time.Sleep(50 * time.Microsecond)
							}
						}
					})
					var wg sync.WaitGroup
					for w := range 4 {
						wg.Go(func() {
							rng := rand.New(rand.NewSource(int64(w) + 99))
							for i := range 3000 {
								if w == 0 && i%5 == 0 {
									clk.Advance(time.Duration(rng.Intn(3000)) * time.Microsecond)
								}
								key := fmt.Sprint("k", rng.Intn(2))
								if setLimits && w == 1 && i%50 == 0 {
									if rng.Intn(2) == 0 {
										e.SetLimit(key, 20+rng.Int63n(30))
									} else {
										e.UpdateLimits(func(string, int64) int64 { return 20 + rng.Int63n(30) })
									}
								}
								n := 1 + rng.Int63n(4)
								switch rng.Intn(3) {
								case 0:
									e.AllowN(key, n)
									issued.Add(1)
								case 1:
									r := e.Reserve(key, n)
									issued.Add(1)
									if rng.Intn(2) == 0 && r.Cancel() {
										cancels.Add(1)
									}
								case 2:
									idx, _ := engine.AllowAll(time.Unix(0, clk.UnixNano()), engine.Request{Engine: e, Key: "k0", N: n}, engine.Request{Engine: e, Key: "k1", N: 1 + rng.Int63n(3)})
									if idx < 0 {
										issued.Add(2)
									} else {
										issued.Add(int64(idx) + 1)
										if idx == 1 {
											cancels.Add(1)
										}
									}
								}
							}
						})
					}
					wg.Wait()
					close(stop)
					aw.Wait()
					r := e.Audit()
					t.Logf("issued %d cancels %d: %+v", issued.Load(), cancels.Load(), r)
					advConsistent(t, r)
					for _, bad := range reports {
						t.Errorf("inconsistent concurrent report %+v", bad)
					}
					if r.Dropped == 0 && r.Decisions != issued.Load() {
						t.Errorf("decisions %d, issued %d", r.Decisions, issued.Load())
					}
					// cancels counts AllowAll's as if they always gave back: an upper bound.
					if r.Dropped == 0 && r.Unadmits > cancels.Load() {
						t.Errorf("unadmits %d, cancels %d", r.Unadmits, cancels.Load())
					}
					if r.FalseAdmits != 0 || (r.WorstWindow > 1 && !setLimits) {
						t.Errorf("%v: false admits %d, worst %v", alg, r.FalseAdmits, r.WorstWindow)
					}
				})
			}
		}
	}
}
