package engine_test

import (
	"fmt"
	"math/rand"
	"runtime"
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
func TestAuditConcurrentMixed(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		for _, buf := range []int{64, 1 << 16} {
			for _, setLimits := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/buf=%d/setlimits=%v", alg, buf, setLimits), func(t *testing.T) {
					clk := engine.NewManualClock(t0)
					e := newEngineNoCloseCheck(t, engine.Config{Limit: 30, Window: 50 * time.Millisecond, SubWindows: 5, Algorithm: alg,
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
					checkReportConsistent(t, r)
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
					// With limits raised while decisions run, the audit can
					// count a false admit that did not happen (a decision
					// under the replaced limit replayed after one under the
					// raised limit: docs/design.md §9); it showed up only on a
					// loaded machine, so only the runs without limit changes
					// can judge the engine by FalseAdmits.
					if !setLimits && (r.FalseAdmits != 0 || r.WorstWindow > 1) {
						t.Errorf("%v: false admits %d, worst %v", alg, r.FalseAdmits, r.WorstWindow)
					}
				})
			}
		}
	}
}

// Close racing with decisions and Audit calls; every decision accounted for
// (Decisions + Dropped), and the report stays consistent.
func TestAuditCloseRace(t *testing.T) {
	for round := 0; round < 5; round++ {
		e, err := engine.New(engine.Config{Limit: 1 << 20, Window: time.Second, Audit: 1, AuditBuffer: 64})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		const per = 3000
		for w := range 3 {
			wg.Go(func() {
				for i := range per {
					e.AllowN(fmt.Sprint("k", (i+w)%4), 1)
				}
			})
		}
		wg.Go(func() {
			for range 50 {
				r := e.Audit()
				if r.Decisions != r.Admits+r.Denies || r.Decisions != r.Judged+r.Unjudged {
					t.Errorf("inconsistent %+v", r)
				}
			}
		})
		wg.Go(func() { time.Sleep(time.Millisecond); e.Close() })
		wg.Wait()
		r := e.Audit()
		if r.Decisions+r.Dropped != 3*per {
			t.Errorf("decisions %d + dropped %d != %d", r.Decisions, r.Dropped, 3*per)
		}
		checkReportConsistent(t, r)
		if r.FalseAdmits != 0 || r.FalseDenies != 0 {
			t.Errorf("%+v", r)
		}
	}
}

// Real time, CoarseClock (many decisions at one instant), goroutines that
// Reserve, Cancel (some twice, some concurrently), AllowAll and Allow on a
// few hot keys, with a tiny AuditBuffer (drops) and concurrent Audit
// calls: Strict and the log never report a false admit nor a window above
// 1, and the report stays consistent.
func TestAuditCoarseConcurrent(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		for _, buf := range []int{64, 1 << 14} {
			t.Run(fmt.Sprint(alg, buf), func(t *testing.T) {
				e := newEngineNoCloseCheck(t, engine.Config{Limit: 30, Window: 40 * time.Millisecond, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: buf, CoarseClock: 200 * time.Microsecond})
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
				checkReportConsistent(t, r)
				if r.FalseAdmits != 0 || r.WorstWindow > 1 {
					t.Errorf("%v: false admits %+v", alg, r)
				}
			})
		}
	}
}

// Two reservations of 2 units at one instant (limit 4). Goroutines A and B
// cancel R1 concurrently (one wins), C cancels R2. The engine then holds 0
// of those units, and a sequential AllowAt of 4 is admitted. If the
// loser's unadmit took R2's units and C's unadmit then found nothing at
// that time, the loser's readmit puts 2 units back that nobody holds:
// the fill is judged a false admit (Strict, log), window 1.5.
func TestAuditDoubleCancelInterleaved(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, DisableEviction: true, AuditBuffer: 1 << 20})
			iters := scaled(4000, 20000)
			if raceOn {
				iters = scaled(1500, 5000)
			}
			for i := 0; i < iters; i++ {
				key := fmt.Sprint("k", i%64)
				now := t0.Add(time.Duration(i/64) * 3 * time.Second)
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

// A SlidingLog key whose log SetLimit keeps moving into larger allocations
// while goroutines reserve, cancel and AllowAll on it: the audit's report
// stays consistent and shows no window above the largest limit set.
func TestAuditLogMoveWhileCancelling(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindowStrict} {
		for round := 0; round < scaled(1, 4); round++ {
			t.Run(fmt.Sprint(alg, round), func(t *testing.T) {
				e := newEngineNoCloseCheck(t, engine.Config{Limit: 20, Window: 100 * time.Millisecond, SubWindows: 5, Algorithm: alg, Audit: 1, PerKeyLimits: true, DisableEviction: true, MaxLogLimit: 1 << 16, AuditBuffer: 1 << 20})
				var clk atomic.Int64
				clk.Store(t0.UnixNano())
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
				var maxSet atomic.Int64
				maxSet.Store(20)
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
						maxSet.Store(lim)
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
				checkReportConsistent(t, r)
				// Every limit change here is a raise, so the audit may count
				// a false admit that did not happen (docs/design.md §9: a
				// decision under the replaced limit replayed after one under
				// the raised one; seen once in several runs). What no replay
				// order can show: a window above the largest limit set.
				if float64(r.WorstWindow)*20 > float64(maxSet.Load()) {
					t.Errorf("a window above every limit set (%d): %+v", maxSet.Load(), r)
				}
			})
		}
	}
}

// Concurrent Reserve/Cancel, AllowAll refusals (internal cancels) and
// AllowN on a few strict keys, real clock, optional CoarseClock: Strict
// must show no false admit; counts consistent; Unadmits ≤ cancels.
func TestAuditConcurrentCancelStrict(t *testing.T) {
	for _, coarse := range []time.Duration{0, time.Millisecond} {
		for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 5, Window: 50 * time.Millisecond, SubWindows: 5, Algorithm: alg, Audit: 1, CoarseClock: coarse, AuditBuffer: 1 << 16})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var cancels int64
			stop := time.Now().Add(700 * time.Millisecond)
			for g := 0; g < 4; g++ {
				wg.Go(func() {
					rng := rand.New(rand.NewSource(int64(g)))
					var held []*engine.Reservation
					var c int64
					for time.Now().Before(stop) {
						k := []string{"a", "b"}[rng.Intn(2)]
						switch rng.Intn(5) {
						case 0:
							e.AllowN(k, 1+rng.Int63n(3))
						case 1, 2:
							r := new(engine.Reservation)
							*r = e.Reserve(k, 1+rng.Int63n(2))
							if r.Decision().Allowed {
								held = append(held, r)
							}
						case 3:
							if len(held) > 0 {
								j := rng.Intn(len(held))
								if held[j].Cancel() {
									c++
								}
								held = append(held[:j], held[j+1:]...)
							}
						case 4:
							idx, _ := engine.AllowAll(time.Now(), engine.Request{Engine: e, Key: "a", N: 1 + rng.Int63n(3)}, engine.Request{Engine: e, Key: "b", N: 1 + rng.Int63n(5)})
							if idx > 0 {
								c++
							}
						}
					}
					mu.Lock()
					cancels += c
					mu.Unlock()
				})
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					time.Sleep(3 * time.Millisecond)
					e.Audit()
				}
			}()
			wg.Wait()
			rep := e.Audit()
			t.Logf("coarse=%v %v %+v cancels=%d", coarse, alg, rep, cancels)
			checkReportConsistent(t, rep)
			if rep.FalseAdmits != 0 {
				t.Errorf("coarse=%v %v: FalseAdmits %d (Dropped %d)", coarse, alg, rep.FalseAdmits, rep.Dropped)
			}
			if rep.Unadmits > cancels {
				t.Errorf("Unadmits %d > cancels %d", rep.Unadmits, cancels)
			}
		}
	}
}
