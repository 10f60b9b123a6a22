package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

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
func TestReview5AuditReadmitPutsBackElsewhere(t *testing.T) {
	cfg := engine.Config{Limit: 3, Window: time.Second, Algorithm: engine.FixedWindow, Audit: 1, DisableEviction: true}
	e := advNew(t, cfg)
	at := func(ms int) time.Time { return advMs(advT0, ms) }
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
