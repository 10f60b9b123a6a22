package engine_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// The self-audit judges settled and charged units truthfully: a debt's
// units are in the exact window of every decision after it (a refusal over
// a debt is right, never a false deny), a settle below the reservation
// takes its units out (Unadmits), and a charge is counted in Charges and
// judged by no one. A hand-worked sequence, every algorithm, against the
// model's audit side.
func TestAuditSettleAndChargeSteps(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, DisableEviction: true}
			e := newEngineNoCloseCheck(t, cfg)
			aud := newModel(cfg)
			at := func(d time.Duration) time.Time { return t0.Add(d) }

			r := e.ReserveAt("k", 6, at(0))
			aud.observe("k", 6, at(0), r.Decision())
			_, err := r.SettleAt(14, at(10*ms)) // a debt of 8
			require.NoError(t, err)
			aud.observeCharge("k", 8, at(10*ms))
			for _, p := range []time.Duration{20 * ms, 600 * ms, 999 * ms} {
				d := e.AllowAt("k", 1, at(p))
				require.False(t, d.Allowed, "%v: over the debt", p)
				aud.observe("k", 1, at(p), d)
			}

			r = e.ReserveAt("k", 5, at(1300*ms))
			require.True(t, r.Decision().Allowed)
			aud.observe("k", 5, at(1300*ms), r.Decision())
			_, err = r.SettleAt(2, at(1310*ms)) // 3 go back
			require.NoError(t, err)
			aud.unadmit("k", len(aud.keys["k"].log)-1, 3)
			d := e.AllowAt("k", 8, at(1320*ms))
			require.True(t, d.Allowed, "%+v", d)
			aud.observe("k", 8, at(1320*ms), d)

			d, err = e.ChargeAt("c", 30, at(1400*ms))
			require.NoError(t, err)
			require.False(t, d.Allowed)
			aud.observeCharge("c", 30, at(1400*ms))
			d = e.AllowAt("c", 1, at(1500*ms))
			aud.observe("c", 1, at(1500*ms), d)

			rep := e.Audit()
			require.Equal(t, int64(0), rep.FalseAdmits+rep.FalseDenies, "%+v", rep)
			require.Equal(t, int64(2), rep.Charges)
			require.Equal(t, int64(1), rep.Unadmits)
			aud.checkAudit(t, rep)
		})
	}
}

// Random sequential scripts of AllowAt, ReserveAt, Cancel, SettleAt and
// ChargeAt on two keys, with steps back and jumps, drains at random
// points: the report is the model's, every count. A second model, of the
// decisions, says whether a settle's refund found its sub-window still in
// the key's window (only then is it an unadmit).
func TestAuditSettleMatchesModel(t *testing.T) {
	for _, alg := range allAlgorithms {
		for seed := uint64(1); seed <= uint64(scaled(10, 60)); seed++ {
			t.Run(fmt.Sprintf("%v/%d", alg, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 31))
				sub := []int{1, 3, 4}[rng.IntN(3)]
				win := time.Duration(999_999_999) / time.Duration(sub) * time.Duration(sub)
				limit := int64(2 + rng.IntN(8))
				clk := engine.NewManualClock(t0)
				cfg := engine.Config{Limit: limit, Window: win, SubWindows: sub, Algorithm: alg, Audit: 1, Clock: clk, DisableEviction: true}
				e := newEngineNoCloseCheck(t, cfg)
				aud, dec := newModel(cfg), newModel(cfg)
				type held struct {
					r  engine.Reservation
					mr modelRes
					ev int // its entry in aud's log
				}
				var hs []held
				now := t0
				newest := now
				for i := 0; i < 300; i++ {
					switch x := rng.IntN(20); {
					case x < 8:
						now = now.Add(time.Duration(rng.Int64N(int64(win) / 4)))
					case x < 10:
						now = now.Add(-time.Duration(rng.Int64N(int64(win) / 2)))
					case x < 11:
						now = now.Add(win + time.Duration(rng.Int64N(int64(win))))
					}
					if now.Before(t0) {
						now = t0
					}
					if now.After(newest) {
						newest = now
					}
					clk.Set(newest)
					key := []string{"a", "b"}[rng.IntN(2)]
					switch op := rng.IntN(12); {
					case op < 4:
						n := rng.Int64N(limit + 2)
						d := e.AllowAt(key, n, now)
						require.Equal(t, dec.decide(key, n, now.UnixNano()), d, "step %d", i)
						aud.observe(key, n, now, d)
					case op < 7:
						n := rng.Int64N(limit + 1)
						r := e.ReserveAt(key, n, now)
						md, mr := dec.reserve(key, n, now.UnixNano())
						require.Equal(t, md, r.Decision(), "step %d", i)
						aud.observe(key, n, now, r.Decision())
						if r.Units() > 0 {
							hs = append(hs, held{r, mr, len(aud.keys[key].log) - 1})
						}
					case op < 10 && len(hs) > 0:
						j := rng.IntN(len(hs))
						h := hs[j]
						hs = append(hs[:j], hs[j+1:]...)
						if rng.IntN(3) == 0 {
							if h.r.Cancel() {
								require.True(t, dec.cancel(h.mr), "step %d", i)
								aud.unadmit(h.mr.key, h.ev, h.mr.n)
							} else {
								require.False(t, dec.cancel(h.mr), "step %d", i)
							}
							continue
						}
						actual := rng.Int64N(3 * limit)
						back := actual < h.mr.n && dec.refundable(h.mr)
						d, err := h.r.SettleAt(actual, now)
						require.NoError(t, err, "step %d", i)
						require.Equal(t, dec.settle(h.mr, actual, now.UnixNano()), d, "step %d: SettleAt(%d) of %d", i, actual, h.mr.n)
						switch {
						case back:
							aud.unadmit(h.mr.key, h.ev, h.mr.n-actual)
						case actual > h.mr.n:
							aud.observeCharge(h.mr.key, actual-h.mr.n, now)
						}
					case op < 11:
						n := rng.Int64N(2 * limit)
						d, err := e.ChargeAt(key, n, now)
						require.NoError(t, err)
						require.Equal(t, dec.charge(key, n, now.UnixNano()), d, "step %d", i)
						aud.observeCharge(key, n, now)
					default:
						e.Audit()
					}
				}
				got := e.Audit()
				require.Equal(t, int64(0), got.Dropped)
				if alg == engine.SlidingWindowStrict || alg == engine.SlidingLog {
					require.Equal(t, int64(0), got.FalseAdmits, "%v admits nothing falsely, debts or not", alg)
				}
				// UnadmitMissed is the audit's own judgement of the exact
				// window (see TestAuditModelMixed); the rest is the model's.
				got.UnadmitMissed = aud.rep.UnadmitMissed
				aud.checkAudit(t, got)
			})
		}
	}
}

// Goroutines reserve, settle (to fewer or more units), charge and decide
// on two sampled keys, with a shared manual clock and concurrent Audit
// calls. A charge and a decision of one key in one sub-window reach the
// buffer in either order, whatever order the engine applied them in: the
// audit must never report a false admit for Strict or the log (an
// admission it cannot place before or after a charge is Unjudged), and
// it counts every charge once.
func TestAuditSettleChargeConcurrent(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 40, Window: 100 * time.Millisecond, SubWindows: 10, Algorithm: alg,
				Audit: 1, Clock: clk, DisableEviction: true, AuditBuffer: 1 << 16, MaxLogLimit: 1 << 16})
			var issued, charges, cancels atomic.Int64
			stop := make(chan struct{})
			var aw sync.WaitGroup
			aw.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						e.Audit()
					}
				}
			})
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					for i := range scaled(2000, 6000) {
						if i%4 == 0 {
							clk.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
						}
						key := fmt.Sprint("k", rng.IntN(2))
						n := 1 + rng.Int64N(3)
						switch x := rng.IntN(100); {
						case x < 30:
							e.AllowN(key, n)
							issued.Add(1)
						case x < 33:
							if _, err := e.Charge(key, n); err != nil {
								panic(err)
							}
							charges.Add(1)
						default:
							r := e.Reserve(key, n)
							issued.Add(1)
							if !r.Decision().Allowed {
								continue
							}
							if x < 45 {
								if r.Cancel() {
									cancels.Add(1)
								}
								continue
							}
							actual := n - 1 + rng.Int64N(3) // one fewer, as many, or one more
							if _, err := r.Settle(actual); err != nil {
								panic(err)
							}
							if actual > n {
								charges.Add(1)
							}
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			aw.Wait()
			r := e.Audit()
			require.Zero(t, r.Dropped)
			require.Equal(t, issued.Load(), r.Decisions)
			require.Equal(t, charges.Load(), r.Charges)
			require.GreaterOrEqual(t, r.Unadmits, cancels.Load())
			require.Equal(t, r.Decisions, r.Judged+r.Unjudged)
			require.Zero(t, r.FalseAdmits, "%+v", r)
			require.LessOrEqual(t, r.WorstWindow, 1.0, "%+v", r)
			t.Logf("%+v", r)
		})
	}
}

// "ChargeAt ... An error changes nothing" and the self-audit's Charges counts
// "the charges replayed into the logs": a charge refused with ErrDebtFull is
// not replayed, so the nine admissions that still fit after it are not
// judged against units that were never charged (a false admit reported for
// Strict and SlidingLog, which "make no false admits").
func TestAuditIgnoresRefusedCharges(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg,
				DisableEviction: true, Audit: 1, MaxLogLimit: 20})
			at := debtAt(0)
			require.True(t, e.AllowAt("k", 1, at).Allowed)
			big := int64(engine.MaxLimit)
			if alg == engine.SlidingLog {
				big = 20
			}
			_, err := e.ChargeAt("k", big, at)
			require.ErrorIs(t, err, engine.ErrDebtFull)
			r := e.ReserveAt("k", 1, at)
			require.True(t, r.Decision().Allowed)
			_, err = r.SettleAt(1+big, at)
			require.ErrorIs(t, err, engine.ErrDebtFull)
			for i := range 8 {
				require.True(t, e.AllowAt("k", 1, at).Allowed, "admission %d", i)
			}
			require.False(t, e.AllowAt("k", 1, at).Allowed)
			rep := e.Audit()
			require.Zero(t, rep.Charges, "%+v", rep)
			require.Zero(t, rep.FalseAdmits, "%+v", rep)
			require.Zero(t, rep.FalseDenies, "%+v", rep)
		})
	}
}

// A debt of MaxLimit units under the self-audit: the audit's log holds
// "one [entry] per admitted decision still inside its key's window" (32
// bytes each, AuditMaxEntries), so a huge charge costs one entry, and the
// decisions after it are judged with it.
func TestAuditHugeDebt(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true, Audit: 1})
		_, err := e.ChargeAt("k", engine.MaxLimit, debtAt(0))
		require.NoError(t, err)
		r := e.ReserveAt("j", 1, debtAt(0))
		_, err = r.SettleAt(engine.MaxLimit, debtAt(0))
		require.NoError(t, err)
		require.False(t, e.AllowAt("k", 1, debtAt(int64(time.Second))).Allowed)
		require.False(t, e.AllowAt("j", 1, debtAt(int64(time.Second))).Allowed)
		rep := e.Audit()
		require.Equal(t, int64(2), rep.Charges, alg)
		require.LessOrEqual(t, rep.Entries, int64(4), "%v: %+v", alg, rep)
		require.Zero(t, rep.FalseDenies, "%v: %+v", alg, rep)
		require.Zero(t, rep.KeysSkipped, "%v: %+v", alg, rep)
	}
}

// The self-audit across a reclamation: a debt settled onto the key's new
// state is judged with ("a refusal over a debt is right, not a false
// deny"), and a refund that reaches nothing takes nothing out of the new
// log.
func TestAuditDebtAcrossReclamation(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(debtAt(0))
			e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour, Audit: 1})
			r1 := e.ReserveAt("k", 5, debtAt(0))
			r2 := e.ReserveAt("k", 2, debtAt(0))
			require.True(t, r1.Decision().Allowed && r2.Decision().Allowed)
			clk.Advance(20 * time.Second)
			require.Equal(t, 1, e.Sweep())
			now := debtAt(int64(20 * time.Second))
			require.True(t, e.AllowAt("k", 3, now).Allowed)
			_, err := r1.SettleAt(12, now) // a debt of 7 on the new state: 10 in all
			require.NoError(t, err)
			_, err = r2.SettleAt(0, now) // nothing to give back
			require.NoError(t, err)
			for range 3 {
				require.False(t, e.AllowAt("k", 1, now).Allowed)
			}
			rep := e.Audit()
			require.Zero(t, rep.FalseDenies, "%+v", rep)
			require.Zero(t, rep.FalseAdmits, "%+v", rep)
			require.Equal(t, int64(1), rep.Charges, "%+v", rep)
		})
	}
}
