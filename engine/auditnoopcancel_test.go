package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A Cancel that gives nothing back "changes nothing" (README: "one that
// gives nothing back changes nothing"; AuditReport: Unadmits and
// UnadmitMissed count cancelled reservations whose units the engine gave
// back). FixedWindow: the reservation's window has passed for the key, so
// Cancel returns false; the key's next decision comes at various offsets.
func TestAuditNoopCancelFixed(t *testing.T) {
	for _, nextMs := range []int{1200, 1499, 1500, 1501, 1700, 1999, 2600} {
		t.Run(fmt.Sprint(nextMs), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: engine.FixedWindow, Audit: 1, DisableEviction: true, Clock: clk})
			r := e.ReserveAt("k", 2, atMs(t0, 500))
			if !r.Decision().Allowed {
				t.Fatal("denied")
			}
			e.AllowAt("k", 1, atMs(t0, nextMs))
			clk.Set(atMs(t0, nextMs))
			if r.Cancel() {
				t.Fatal("Cancel gave units back after the key's window moved on")
			}
			rep := e.Audit()
			checkReportConsistent(t, rep)
			if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
				t.Errorf("a Cancel that gave nothing back is counted: Unadmits=%d UnadmitMissed=%d (%+v)", rep.Unadmits, rep.UnadmitMissed, rep)
			}
		})
	}
}

// As above, with two reservations clamped to the same window start, one
// cancelled (gave back) while the window was the key's, the other after
// the key moved on (gives nothing back).
func TestAuditNoopCancelFixedTwo(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, nextMs := range []int{2050, 2300, 2600} {
			t.Run(fmt.Sprint(alg, "/", nextMs), func(t *testing.T) {
				clk := engine.NewManualClock(t0)
				e := newEngineNoCloseCheck(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 1, Algorithm: alg, Audit: 1, DisableEviction: true, Clock: clk})
				e.AllowAt("a", 1, atMs(t0, 1500))
				r1 := e.ReserveAt("a", 2, atMs(t0, 900))
				r2 := e.ReserveAt("a", 1, atMs(t0, 900))
				if !r1.Cancel() {
					t.Fatal("r1 gave nothing back")
				}
				e.AllowAt("a", 1, atMs(t0, nextMs))
				clk.Set(atMs(t0, nextMs))
				ok := r2.Cancel()
				rep := e.Audit()
				t.Logf("r1 at %v, r2 at %v, r2.Cancel=%v: %+v", r1.At().Sub(t0), r2.At().Sub(t0), ok, rep)
				if !ok && (rep.Unadmits != 1 || rep.UnadmitMissed != 0) {
					t.Errorf("a Cancel that gave nothing back is counted: Unadmits=%d UnadmitMissed=%d, want 1 and 0", rep.Unadmits, rep.UnadmitMissed)
				}
			})
		}
	}
}

// Two reservations recorded at the same effective time r, R2 first and R1
// after another admission later in the window (so R1's log entry is
// newer). R1 is cancelled (the engine gives its 2 units back). The key
// moves on: R2's units leave the exact window, and its Cancel gives
// nothing back. "One that gives nothing back changes nothing" — yet the
// audit puts back R1's cancelled units (its readmit finds R1's entry), so
// a later admission is judged against units nobody holds.
//
// FixedWindow, L = 4, W = 1 s: at 2.35 s the exact window (1.35, 2.35]
// holds the admission at 1.45 (1) and at 2.3 (2): 3 units. Admitting 1 more
// makes 4 ≤ L: not a false admit, and the worst window is 1.0.
func TestAuditNoopCancelRestoresCancelledUnits(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.FixedWindow, Audit: 1, DisableEviction: true, Clock: clk})
	at := func(ms int) time.Time { return atMs(t0, ms) }
	r2 := e.ReserveAt("a", 1, at(1200))
	if !e.AllowAt("a", 1, at(1450)).Allowed {
		t.Fatal("denied")
	}
	r1 := e.ReserveAt("a", 2, at(1200)) // same effective time as r2, judged at 1.45
	if !r1.Decision().Allowed || !r2.Decision().Allowed {
		t.Fatal("denied")
	}
	if !r1.Cancel() {
		t.Fatal("r1: nothing given back")
	}
	if !e.AllowAt("a", 2, at(2300)).Allowed {
		t.Fatal("denied at 2.3")
	}
	clk.Set(at(2300))
	if r2.Cancel() {
		t.Fatal("r2 gave units back after its window ended")
	}
	d := e.AllowAt("a", 1, at(2350))
	if !d.Allowed {
		t.Fatalf("denied at 2.35: %+v", d)
	}
	rep := e.Audit()
	t.Logf("%+v", rep)
	checkReportConsistent(t, rep)
	// Exact: window at 2.35 holds 1 (1.45) + 2 (2.3) + 1 = 4 = L.
	if rep.FalseAdmits != 0 {
		t.Errorf("FalseAdmits = %d, want 0: no window ever held more than 4 units", rep.FalseAdmits)
	}
	if rep.WorstWindow > 1 {
		t.Errorf("WorstWindow = %v, want 1.0", rep.WorstWindow)
	}
	if rep.Unadmits != 1 || rep.UnadmitMissed != 0 {
		t.Errorf("Unadmits = %d, UnadmitMissed = %d; want 1 and 0 (r2's Cancel gave nothing back)", rep.Unadmits, rep.UnadmitMissed)
	}
}

// FixedWindow, L = 3, W = 1 s. R1 and R2 are both requested at 0.1 s; R2
// after an admission at 0.6 s, so the audit records R2's unit at 0.6 s
// (its judged time) with the same request time as R1's. R2 is cancelled
// (its own entry, at 0.6 s, is emptied). The key moves to the next window
// (1.05 s); R1's Cancel then gives nothing back (its window is over), so
// the audit's unadmit for R1 is undone by a readmit. The readmit must put
// the unit back where the unadmit took it (R1's entry at 0.1 s); if it
// puts it into R2's entry at 0.6 s, the log holds a unit at 0.6 s nobody
// holds. At 1.2 s the exact window (0.2, 1.2] holds 0.6 s (1) + 1.05 s (1):
// admitting 1 more makes 3 ≤ L, no false admit, worst window 1.0.
func TestAuditReadmitPutsBackElsewhere(t *testing.T) {
	cfg := engine.Config{Limit: 3, Window: time.Second, Algorithm: engine.FixedWindow, Audit: 1, DisableEviction: true}
	e := newEngineNoCloseCheck(t, cfg)
	at := func(ms int) time.Time { return atMs(t0, ms) }
	r1 := e.ReserveAt("k", 1, at(100))
	if !e.AllowAt("k", 1, at(600)).Allowed {
		t.Fatal("0.6")
	}
	r2 := e.ReserveAt("k", 1, at(100))
	if !r1.Decision().Allowed || !r2.Decision().Allowed {
		t.Fatal("setup")
	}
	if !r2.Cancel() {
		t.Fatal("r2 cancel")
	}
	if !e.AllowAt("k", 1, at(1050)).Allowed {
		t.Fatal("1.05")
	}
	if r1.Cancel() {
		t.Fatal("r1 gave units back after its window")
	}
	d := e.AllowAt("k", 1, at(1200))
	if !d.Allowed {
		t.Fatalf("1.2: %+v", d)
	}
	rep := e.Audit()
	t.Logf("%+v", rep)
	if rep.FalseAdmits != 0 || rep.WorstWindow > 1 {
		t.Errorf("FalseAdmits = %d, WorstWindow = %v; the exact window of the units held never passed 3 = L", rep.FalseAdmits, rep.WorstWindow)
	}
}

// A Cancel that gives nothing back (the sub-window left the key's window)
// "changes nothing": neither Unadmits nor UnadmitMissed.
func TestAuditNoopCancelCountsNothing(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, DisableEviction: true, Clock: clk})
			r := e.ReserveAt("k", 3, t0)
			e.AllowAt("k", 1, atMs(t0, 5000))
			clk.Set(atMs(t0, 5000))
			if r.Cancel() {
				t.Fatal("cancel gave back")
			}
			rep := e.Audit()
			if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
				t.Errorf("no-op cancel counted: %+v", rep)
			}
			// a second cancel of the same reservation
			r.Cancel()
			rep = e.Audit()
			if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
				t.Errorf("second cancel counted: %+v", rep)
			}
			checkReportConsistent(t, rep)
		})
	}
}
