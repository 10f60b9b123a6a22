package engine_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// Copies of one reservation settled and cancelled from many goroutines at
// once: "Cancel or Settle on any of them acts at most once, whichever copy
// and however many calls". Exactly one call wins, and the key's count is
// what that one call made it (checked by a sequential fill at the same
// instant: no lost count, no double return).
func TestAdv31CopiesSettleOnce(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 1000, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true, MaxLogLimit: 100_000})
			for round := range 50 {
				at := advAt(int64(round) * int64(10*time.Second))
				require.True(t, e.AllowAt("k", 100, at).Allowed)
				r := e.ReserveAt("k", 10, at)
				require.True(t, r.Decision().Allowed)
				var wins atomic.Int64
				var effect atomic.Int64 // the winner's units, after it
				var wg sync.WaitGroup
				start := make(chan struct{})
				for g := range 16 {
					c := r // a copy per goroutine
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						if g%4 == 0 {
							if c.Cancel() {
								wins.Add(1)
								effect.Store(0)
							}
							return
						}
						actual := int64(g * 3) // 3 … 45: fewer, and more
						if _, err := c.SettleAt(actual, at); err == nil {
							wins.Add(1)
							effect.Store(actual)
						}
					}()
				}
				close(start)
				wg.Wait()
				require.Equal(t, int64(1), wins.Load(), "round %d", round)
				want := 1000 - 100 - effect.Load()
				require.Equal(t, want, e.AllowAt("k", 0, at).Remaining, "round %d", round)
			}
		})
	}
}

// Reservations settled to at most their units (refunds only, no debt),
// racing admissions on one key at instants that cross sub-window boundaries:
// a reservation's units are live from its admission until its settle, so
// a counter raised after each admission and lowered before each settle never
// exceeds the limit (Strict and SlidingLog: "No window of length Window ever
// holds more than Limit", and the whole run fits in one window here).
// Afterwards the self-audit reports no false admit.
func TestAdv31RefundsRacingAdmissions(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 20
			e := newEngine(t, engine.Config{Limit: limit, Window: time.Hour, SubWindows: 4, Algorithm: alg, DisableEviction: true, Audit: 1, AuditBuffer: 1 << 16})
			var live, most atomic.Int64
			var clock atomic.Int64 // ns after advBase, moves forward within the first sub-window
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					for range advIters(3000) {
						now := advAt(clock.Add(int64(rng.IntN(1000))))
						n := 1 + rng.Int64N(3)
						r := e.ReserveAt("k", n, now)
						if !r.Decision().Allowed {
							runtime.Gosched()
							continue
						}
						v := live.Add(n)
						for {
							o := most.Load()
							if v <= o || most.CompareAndSwap(o, v) {
								break
							}
						}
						runtime.Gosched()
						actual := int64(0) // all back (Settle(0) is Cancel), so that the key churns
						live.Add(-n)
						if _, err := r.SettleAt(actual, now); err != nil {
							t.Error(err)
							return
						}
						live.Add(actual) // still counted until the window ends
						_ = actual
					}
				}()
			}
			wg.Wait()
			require.LessOrEqual(t, most.Load(), int64(limit), "live units at once")
			rep := e.Audit()
			require.Zero(t, rep.FalseAdmits, "%+v", rep)
			require.Greater(t, rep.Admits, int64(advIters(3000)/3), "%+v", rep)
		})
	}
}

// Charges, settles above and below the reservation, and admissions racing
// on a few keys, across sub-window boundaries: the self-audit judges with
// every charged unit and never reports a false admit for Strict or
// SlidingLog (AuditReport: "Strict makes no false admits"; "under
// contention any algorithm may deny falsely, never admit falsely";
// design.md §3b: an admission the buffer's order cannot judge is
// Unjudged).
func TestAdv31AuditDebtsRacingAdmissions(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 20
			e := newEngine(t, engine.Config{Limit: limit, Window: 40 * time.Millisecond, SubWindows: 4, Algorithm: alg,
				DisableEviction: true, Audit: 1, AuditBuffer: 1 << 16, MaxLogLimit: 100_000})
			var clock atomic.Int64
			var wg sync.WaitGroup
			keys := []string{"a", "b", "c"}
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 11))
					for range advIters(4000) {
						now := advAt(clock.Add(int64(rng.IntN(400_000))))
						k := keys[rng.IntN(len(keys))]
						switch rng.IntN(40) {
						case 0:
							_, _ = e.ChargeAt(k, 1+rng.Int64N(5), now)
						case 1, 2, 3, 4, 5, 6, 7, 8, 9, 10:
							e.AllowAt(k, 1+rng.Int64N(3), now)
						default:
							n := 1 + rng.Int64N(4)
							r := e.ReserveAt(k, n, now)
							if !r.Decision().Allowed {
								continue
							}
							runtime.Gosched()
							actual := rng.Int64N(n + 1)
							if rng.IntN(10) == 0 {
								actual = n + 1 + rng.Int64N(3)
							}
							_, _ = r.SettleAt(actual, advAt(clock.Add(int64(rng.IntN(400_000)))))
						}
					}
				}()
			}
			wg.Wait()
			rep := e.Audit()
			require.Zero(t, rep.Dropped, "%+v", rep)
			require.Zero(t, rep.FalseAdmits, "%+v", rep)
			require.Greater(t, rep.Charges, int64(advIters(4000)/8), "%+v", rep)
			require.Greater(t, rep.Admits, int64(advIters(4000)/2), "%+v", rep)
			t.Logf("%+v", rep)
		})
	}
}

// SlidingLog: a settle's refund racing a charge (or a SetLimit) that moves
// the key's log into a larger allocation. design.md §3b: "Cancel follows
// the key's current ring and removes them there"; Cancel "reports whether
// it did", and a settle's refund is Cancel's. Whichever goes first, the
// count afterwards is the charge plus what the settle kept.
func TestAdv31LogRefundRacingGrowth(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 100, Window: time.Hour, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 100_000, PerKeyLimits: true})
	at := advAt(0)
	for i := range 300 {
		key := "k" + itoaAdv(i)
		r := e.ReserveAt(key, 50, at)
		require.True(t, r.Decision().Allowed)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var refunded atomic.Bool
		keep := int64(i % 3 * 10) // 0, 10, 20
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			if i%2 == 0 {
				_, err := e.ChargeAt(key, 60, at)
				require.NoError(t, err)
			} else {
				require.NoError(t, e.SetLimitAt(key, 1000, at))
				_, err := e.ChargeAt(key, 60, at)
				require.NoError(t, err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			if keep == 0 {
				refunded.Store(r.Cancel())
				return
			}
			_, err := r.SettleAt(keep, at)
			refunded.Store(err == nil)
		}()
		close(start)
		wg.Wait()
		require.True(t, refunded.Load(), "iteration %d", i)
		limit := int64(100)
		if i%2 == 1 {
			limit = 1000
		}
		require.Equal(t, max(0, limit-60-keep), e.AllowAt(key, 0, at).Remaining, "iteration %d: kept %d", i, keep)
	}
}

func itoaAdv(i int) string { return fmt.Sprint(i) }

// A settle's debt, and a plain charge, racing the sweep that reclaims the
// key: "a debt is the key's, charged on its current state (the
// reservation's ring when it is still live, else the ring the table holds,
// created or replaced as for a decision)", and Sweep: "An increment racing
// with the reclamation is retried on a fresh state, never lost". So after
// the race the key counts the debt at now, whichever won: a lost debt
// would let the next requests be admitted past it (a false admission).
func TestAdv31DebtRacingReclamation(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(advAt(0))
			e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour, MaxLogLimit: 1000})
			for i := range 400 {
				key := "k" + itoaAdv(i%7)
				now := advAt(clk.UnixNano() - advBase.UnixNano())
				r := e.ReserveAt(key, 2, now)
				require.True(t, r.Decision().Allowed, "iteration %d", i)
				clk.Advance(5 * time.Second) // the key is idle long enough to be reclaimed
				now = advAt(clk.UnixNano() - advBase.UnixNano())
				start := make(chan struct{})
				var wg sync.WaitGroup
				wg.Add(2)
				go func() {
					defer wg.Done()
					<-start
					e.Sweep()
				}()
				go func() {
					defer wg.Done()
					<-start
					var err error
					if i%2 == 0 {
						_, err = r.SettleAt(2+7, now) // a debt of 7
					} else {
						_, err = e.ChargeAt(key, 7, now)
					}
					require.NoError(t, err)
				}()
				close(start)
				wg.Wait()
				require.Equal(t, int64(3), e.AllowAt(key, 0, now).Remaining, "iteration %d: the debt of 7 at now", i)
				require.True(t, e.AllowAt(key, 3, now).Allowed)
				require.False(t, e.AllowAt(key, 1, now).Allowed, "iteration %d", i)
			}
			require.Greater(t, e.Stats().Evicted, int64(100), "the sweeps reclaimed keys under the settles")
		})
	}
}

// Strict, in flight, across sub-window boundaries: reservations settled to
// fewer units (mostly 0) race admissions at instants that move through
// many sub-windows. SlidingWindowStrict: "no window of length Window ever
// holds more than Limit admitted units", which for counting means any N+1
// consecutive sub-windows hold at most L (design.md §1). Each goroutine
// adds its reservation's units to its sub-window's tally after the engine
// admitted them, and takes back what it returns before returning it, so a
// tally never exceeds what the engine holds; after each admission at
// epoch E the tallies of E−N … E must sum to at most L.
func TestAdv31StrictInFlightAcrossSubWindows(t *testing.T) {
	const limit, n = 12, 4
	w := 10 * time.Millisecond
	e := newEngine(t, engine.Config{Limit: limit, Window: n * w, SubWindows: n, Algorithm: engine.SlidingWindowStrict, DisableEviction: true})
	const epochs = 200
	var tally [epochs + n + 2]atomic.Int64
	base := advBase.UnixNano() / int64(w)
	var clock atomic.Int64
	var worst atomic.Int64
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 6000 {
				ns := clock.Add(int64(rng.IntN(40_000)))
				if ns >= int64(epochs)*int64(w) {
					return
				}
				now := advAt(ns)
				k := 1 + rng.Int64N(3)
				r := e.ReserveAt("k", k, now)
				if !r.Decision().Allowed {
					continue
				}
				admitted.Add(1)
				ep := r.At().UnixNano()/int64(w) - base
				tally[ep].Add(k)
				var sum int64
				for x := max(0, ep-n); x <= ep; x++ {
					sum += tally[x].Load()
				}
				for {
					o := worst.Load()
					if sum <= o || worst.CompareAndSwap(o, sum) {
						break
					}
				}
				runtime.Gosched()
				keep := int64(0)
				if rng.IntN(8) == 0 {
					keep = rng.Int64N(k)
				}
				tally[ep].Add(keep - k)
				if _, err := r.SettleAt(keep, advAt(clock.Load())); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Greater(t, admitted.Load(), int64(2000))
	require.LessOrEqual(t, worst.Load(), int64(limit), "units live in N+1 consecutive sub-windows")
}

// advIters is n, or a quarter of it under the race detector, whose
// slowdown would make these runs take half a minute each.
func advIters(n int) int {
	if raceOn {
		return n / 4
	}
	return n
}
