package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

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
func TestReview4AuditNoopCancelRestoresCancelledUnits(t *testing.T) {
	clk := engine.NewManualClock(advT0)
	e := advNew(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.FixedWindow, Audit: 1, DisableEviction: true, Clock: clk})
	at := func(ms int) time.Time { return advMs(advT0, ms) }
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
	advConsistent(t, rep)
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
