package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestAuditCountsEveryCancelOfALaggingKey: every successful Cancel of an
// audited reservation is counted once in AuditReport.Unadmits (and, its
// units being inside the window, never in UnadmitMissed), also when a
// drain falls between the cancel's unadmit and its settling event and the
// key lags more than two windows behind the audit's newest time. The
// audit once pruned the record of such an unadmit before its settle was
// replayed, losing the cancel (29,997 of 30,000 counted, Dropped 0).
func TestAuditCountsEveryCancelOfALaggingKey(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, lagging := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/lagging=%v", alg, lagging), func(t *testing.T) {
				testAuditCancelCounts(t, alg, lagging)
			})
		}
	}
}

func testAuditCancelCounts(t *testing.T, alg engine.Algorithm, lagging bool) {
	const W = time.Second
	e := newEngine(t, engine.Config{Limit: 100, Window: W, Algorithm: alg, Audit: 1, DisableEviction: true})
	// Closed: no background drain, so that the test alone chooses where
	// drains fall (a drain between a reservation and its cancel would
	// drop the lagging key's idle log, and count the cancel as missed).
	e.Close()
	drains := 0
	defer engine.SetAuditCancelHook(func() { e.Audit(); drains++ })()
	const rounds = 2000
	var succeeded int64
	for i := range rounds {
		// The other key moves the audit's time on by a quarter window per
		// round (so that each drain prunes); the key under test stays at
		// t0 (lagging) or keeps up with it.
		now := t0.Add(3*W + time.Duration(i)*W/4)
		e.AllowAt("other", 1, now)
		at := now
		if lagging {
			at = t0
		}
		r := e.ReserveAt("k", 1, at)
		if !r.Decision().Allowed {
			t.Fatalf("round %d: reservation refused: %+v", i, r.Decision())
		}
		if r.Cancel() { // the hook drains between its unadmit and its settle
			succeeded++
		}
	}
	rep := e.Audit()
	if drains != rounds || succeeded != rounds {
		t.Fatalf("drains %d, successful cancels %d, want %d each", drains, succeeded, rounds)
	}
	if rep.Dropped != 0 {
		t.Fatalf("Dropped %d: the test needs a buffer that never fills", rep.Dropped)
	}
	if rep.Unadmits != succeeded || rep.UnadmitMissed != 0 {
		t.Fatalf("%d successful cancels, the audit counted Unadmits %d, UnadmitMissed %d; want %d, 0", succeeded, rep.Unadmits, rep.UnadmitMissed, succeeded)
	}
}

// Reserve 8 of 10, a denial of 5 in a later sub-window (right: 8 + 5 > 10),
// then Cancel. The denial came first, so it must be judged with the 8 units.
func TestAuditDenyLaterSubWindowThenCancel(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, denyMs := range []int{100, 350, 600, 900} {
			t.Run(alg.String(), func(t *testing.T) {
				clk := engine.NewManualClock(t0)
				e := newEngineNoCloseCheck(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, DisableEviction: true, Clock: clk})
				r := e.ReserveAt("k", 8, atMs(t0, 100))
				if d := e.AllowAt("k", 5, atMs(t0, denyMs)); d.Allowed {
					t.Fatal("admitted")
				}
				clk.Set(atMs(t0, denyMs+10))
				if !r.Cancel() {
					t.Fatal("cancel")
				}
				rep := e.Audit()
				if rep.FalseDenies != 0 {
					t.Errorf("deny at %d ms judged false: %+v", denyMs, rep)
				}
			})
		}
	}
}

// SlidingLog, one key, sequential: reserve 4 of 5; SetLimitAt (optionally
// behind the key's time, optionally raising the limit so the log moves);
// a denial; then Cancel. The denial came before the cancel, so it must be
// judged with the 4 units in the log (README: "A sequential caller's
// decisions between the reservation and the cancel are all replayed
// before it").
func TestAuditLogCancelAfterBackdatedSetLimit(t *testing.T) {
	cases := []struct {
		name    string
		setAt   time.Duration // from the reservation
		setTo   int64
		skipSet bool
	}{
		{"no setlimit", 0, 0, true},
		{"raise, forward", 10 * time.Millisecond, 6, false},
		{"same, backdated", -300 * time.Millisecond, 5, false},
		{"raise, backdated", -300 * time.Millisecond, 6, false},
		{"raise, backdated 1ns", -1, 6, false},
		{"lower, backdated", -300 * time.Millisecond, 4, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := atMs(t0, 500)
			clk := engine.NewManualClock(base)
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: engine.SlidingLog, Audit: 1, PerKeyLimits: true, DisableEviction: true, Clock: clk})
			r := e.ReserveAt("b", 4, base)
			if !r.Decision().Allowed {
				t.Fatal("denied")
			}
			if !c.skipSet {
				if err := e.SetLimitAt("b", c.setTo, base.Add(c.setAt)); err != nil {
					t.Fatal(err)
				}
			}
			d := e.AllowAt("b", 3, atMs(base, 80))
			if d.Allowed {
				t.Fatalf("admitted: %+v", d)
			}
			clk.Set(atMs(base, 150))
			if !r.Cancel() {
				t.Fatal("cancel gave nothing back")
			}
			rep := e.Audit()
			t.Logf("%+v", rep)
			if rep.FalseDenies != 0 || rep.FalseAdmits != 0 {
				t.Errorf("sequential SlidingLog key: FalseDenies=%d FalseAdmits=%d, want 0 (the denial of 3 with 4 of %d units held is right)", rep.FalseDenies, rep.FalseAdmits, d.Limit)
			}
		})
	}
}

// The same on the engine's clock, with UpdateLimits raising every key's
// limit (the log moves into a larger allocation), as a service applying a
// new policy would.
func TestAuditLogCancelAfterUpdateLimits(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: engine.SlidingLog, Audit: 1, PerKeyLimits: true, Clock: clk})
	r := e.Reserve("tenant", 4)
	if !r.Decision().Allowed {
		t.Fatal("denied")
	}
	clk.Advance(10 * time.Millisecond)
	if err := e.UpdateLimits(func(string, int64) int64 { return 6 }); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Millisecond)
	if d := e.AllowN("tenant", 3); d.Allowed {
		t.Fatalf("admitted %+v", d)
	}
	clk.Advance(10 * time.Millisecond)
	if !r.Cancel() {
		t.Fatal("cancel gave nothing back")
	}
	rep := e.Audit()
	t.Logf("%+v", rep)
	if rep.FalseDenies != 0 {
		t.Errorf("SlidingLog on one goroutine: FalseDenies = %d, want 0 (4 held + 3 > 6: the denial was right)", rep.FalseDenies)
	}
}

// SlidingLog: a reservation made before SetLimit raised the key's limit
// (moving its log into a larger allocation), cancelled after it. A
// sequential SlidingLog key must show neither false admits nor false denies.
func TestAuditLogCancelAfterSetLimitMove(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: time.Second, Algorithm: engine.SlidingLog, Audit: 1, PerKeyLimits: true, DisableEviction: true, Clock: clk})
	r := e.ReserveAt("k", 1, atMs(t0, 0))
	if !r.Decision().Allowed {
		t.Fatal("denied")
	}
	if !e.AllowAt("k", 1, atMs(t0, 1)).Allowed {
		t.Fatal("denied")
	}
	if err := e.SetLimitAt("k", 3, atMs(t0, 2)); err != nil {
		t.Fatal(err)
	}
	ok := r.Cancel()
	t.Logf("cancel: %v", ok)
	var ds []engine.Decision
	for i := 3; i < 7; i++ {
		ds = append(ds, e.AllowAt("k", 1, atMs(t0, i)))
	}
	rep := e.Audit()
	t.Logf("decisions after: %+v", ds)
	t.Logf("%+v", rep)
	if rep.FalseAdmits != 0 || rep.FalseDenies != 0 {
		t.Errorf("SlidingLog, sequential: FalseAdmits=%d FalseDenies=%d, want 0 and 0 (%+v)", rep.FalseAdmits, rep.FalseDenies, rep)
	}
}

// Two reservations made with the same request time 0.1 s, the second one
// after the key moved on to 0.6 s, so the engine records it at 0.6 s.
// Cancelling the first must take out the unit at 0.1 s; if the audit takes
// it from the newest entry "of that ref" (the one at 0.6 s) instead, its
// log holds a unit at 0.1 s (gone at 1.1 s) instead of at 0.6 s, and at
// 1.15 s it sees room the engine rightly does not have: a false deny for
// SlidingLog, which "makes neither on a key whose decisions are not
// concurrent". All sequential.
func TestAuditSameRequestTimeCancel(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 3, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, DisableEviction: true}
			e := newEngineNoCloseCheck(t, cfg)
			ref := newModel(cfg)
			at := func(ms int) time.Time { return atMs(t0, ms) }
			step := func(n int64, ms int) engine.Decision {
				d := e.AllowAt("k", n, at(ms))
				ref.observe("k", n, at(ms), d)
				return d
			}
			a, b := 100, 600
			probes := []int{1150, 1300, 1450, 1599}
			if alg == engine.SlidingWindow || alg == engine.SlidingWindowStrict {
				// both in one sub-window [0.6, 0.7)
				a, b = 610, 690
				probes = []int{1620, 1650, 1680, 1689}
			}
			r1 := e.ReserveAt("k", 1, at(a))
			ref.observe("k", 1, at(a), r1.Decision())
			step(1, b)
			r2 := e.ReserveAt("k", 1, at(a))
			ref.observe("k", 1, at(a), r2.Decision())
			if !r1.Decision().Allowed || !r2.Decision().Allowed {
				t.Fatalf("setup %+v %+v", r1.Decision(), r2.Decision())
			}
			t.Logf("r1 at %v, r2 at %v", r1.At().Sub(t0), r2.At().Sub(t0))
			if !r1.Cancel() {
				t.Fatal("cancel")
			}
			k := ref.keys["k"]
			ref.rep.Unadmits++
			k.log[0].n-- // r1's own unit, at 0.1 s
			var ds []string
			for i, ms := range probes {
				d := step(int64(1+i%2), ms)
				ds = append(ds, fmt.Sprintf("%dms:%v", ms, d.Allowed))
			}
			got := e.Audit()
			t.Logf("decisions %v\n got  %+v\n want %+v", ds, got, ref.rep)
			if alg == engine.SlidingLog && (got.FalseDenies != 0 || got.FalseAdmits != 0) {
				t.Errorf("SlidingLog, sequential: %d false denies, %d false admits", got.FalseDenies, got.FalseAdmits)
			}
			if got.FalseDenies != ref.rep.FalseDenies || got.FalseAdmits != ref.rep.FalseAdmits || got.WorstWindow != ref.rep.WorstWindow {
				t.Errorf("report differs from the exact log: got %d/%d false admits/denies, worst %v; want %d/%d, worst %v",
					got.FalseAdmits, got.FalseDenies, got.WorstWindow, ref.rep.FalseAdmits, ref.rep.FalseDenies, ref.rep.WorstWindow)
			}
		})
	}
}

// No drops. Strict, L = 2, W = 1 s, 10 sub-windows. The reservation is
// decided at the sub-window start 5.6 s but logged at 5.6566 s (the key's
// newest judged time). Its Cancel comes at 6.62 s, when 5.6 s has left the
// exact window but the log entry at 5.6566 s has not; the engine (Strict
// counts [5.6, 5.7) until 6.7 s) gives the unit back. An admission of 2 at
// 6.64 s must not be judged against the cancelled unit.
func TestAuditCancelAfterRefLeftWindow(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, DisableEviction: true})
		at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
		e.AllowAt("a", 1, at(5000))
		if e.AllowAt("a", 2, at(5656.6)).Allowed {
			t.Fatal("5.6566")
		}
		r := e.ReserveAt("a", 1, at(5335))
		if !r.Decision().Allowed {
			t.Fatal("reserve")
		}
		d0 := e.AllowAt("a", 2, at(6620))
		c := r.Cancel()
		d := e.AllowAt("a", 2, at(6640))
		rep := e.Audit()
		t.Logf("%v ref %v, 6.62 admitted %v, cancel %v, 6.64 admitted %v: %+v", alg, r.At().Sub(t0), d0.Allowed, c, d.Allowed, rep)
		if rep.FalseAdmits != 0 && alg != engine.SlidingWindow {
			t.Errorf("%v: FalseAdmits %d (WorstWindow %v)", alg, rep.FalseAdmits, rep.WorstWindow)
		}
		if rep.Entries > 2 {
			t.Errorf("%v: Entries %d", alg, rep.Entries)
		}
	}
}

// Sweep evicts the key (idle by the clock); a reservation from before is
// cancelled after the key was recreated: Cancel gives nothing back.
func TestAuditCancelAfterEviction(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, Clock: clk, SweepInterval: time.Hour})
			r := e.ReserveAt("k", 10, t0)
			clk.Set(atMs(t0, 3500))
			if got := e.Sweep(); got != 1 {
				t.Fatalf("swept %d", got)
			}
			now := atMs(t0, 3500)
			if !e.AllowAt("k", 10, now).Allowed {
				t.Fatal("denied")
			}
			ok := r.Cancel()
			d := e.AllowAt("k", 1, now)
			rep := e.Audit()
			t.Logf("cancel=%v d=%+v %+v", ok, d, rep)
			checkReportConsistent(t, rep)
			if rep.FalseAdmits != 0 || (alg == engine.SlidingLog && rep.FalseDenies != 0) {
				t.Errorf("%+v", rep)
			}
			if !ok && (rep.Unadmits != 0 || rep.UnadmitMissed != 0) {
				t.Errorf("no-op cancel counted: %+v", rep)
			}
		})
	}
}

func TestAuditCloseOffAndRefused(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 5, Window: time.Second})
	e.AllowAt("k", 1, t0)
	if r := e.Audit(); r != (engine.AuditReport{}) {
		t.Errorf("audit off: %+v", r)
	}
	if e.Audited("k") {
		t.Error("Audited with Audit 0")
	}
	e2 := newEngineNoCloseCheck(t, engine.Config{Limit: 5, Window: time.Second, Audit: 1, MaxKeys: 1, KeyLimit: func(k string) int64 {
		if k == "bad" {
			return -1
		}
		return 0
	}, DisableEviction: true})
	e2.Close()
	e2.Close()
	e2.AllowAt("k", 1, t0)
	e2.AllowAt("k", 0, t0)                                          // peek
	e2.AllowAt("k", 6, t0)                                          // n > limit
	e2.AllowAt("k", -1, t0)                                         // n < 0
	e2.AllowAt("k", 1, time.Unix(-5, 0))                            // before 1970
	e2.AllowAt("other", 1, t0)                                      // MaxKeys
	e2.AllowAt("bad", 1, t0)                                        // KeyLimit out of range
	e2.ReserveAt("k", 0, t0)                                        // peek
	engine.AllowAll(t0, engine.Request{Engine: e2, Key: "k", N: 9}) // never
	r := e2.Audit()
	if r.Decisions != 1 || r.Share != 1 {
		t.Errorf("after Close: %+v", r)
	}
	checkReportConsistent(t, r)
}
