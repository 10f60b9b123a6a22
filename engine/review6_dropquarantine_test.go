package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Strict, L = 2, W = 1 s, 10 sub-windows, AuditBuffer 64, one sequential
// caller. A denial at 5.6566 s makes that the key's newest judged time; a
// reservation requested at 5.335 s is decided at the sub-window start
// 5.6 s and its unit logged at 5.6566 s. Decisions requested at 5.18 s
// (decided at 5.6 s) fill the buffer, so the Cancel's unadmit is dropped:
// the quarantine is [5.6 s, 6.6 s). At 6.6435 s the engine rightly admits
// 2 (the cancelled unit was given back), but the audit judges it against a
// log still holding the cancelled unit at 5.6566 s: a false admit for
// Strict, which the README says never happens.
func TestReview6DroppedUnadmitOutlivesQuarantine(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := advNew(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
		at := func(ms float64) time.Time { return advT0.Add(time.Duration(ms * float64(time.Millisecond))) }
		if !e.AllowAt("a", 1, at(5000)).Allowed {
			t.Fatal("5.0")
		}
		if e.AllowAt("a", 2, at(5656.6)).Allowed {
			t.Fatal("5.6566 admitted")
		}
		e.Audit()
		r := e.ReserveAt("a", 1, at(5335))
		if !r.Decision().Allowed {
			t.Fatal("reserve")
		}
		for q := 0; q < 100; q++ {
			e.AllowAt("a", 2, at(5180))
		}
		if !r.Cancel() {
			t.Fatal("cancel")
		}
		e.Audit()
		d := e.AllowAt("a", 2, at(6643.5))
		rep := e.Audit()
		t.Logf("%v reserve at %v; admit at 6.6435: %v; %+v", alg, r.At().Sub(advT0), d.Allowed, rep)
		if rep.FalseAdmits != 0 {
			t.Errorf("%v: FalseAdmits = %d (WorstWindow %v); the engine held 2 units = L in every window", alg, rep.FalseAdmits, rep.WorstWindow)
		}
	}
}
