package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// No drops. Strict, L = 2, W = 1 s, 10 sub-windows. The reservation is
// decided at the sub-window start 5.6 s but logged at 5.6566 s (the key's
// newest judged time). Its Cancel comes at 6.62 s, when 5.6 s has left the
// exact window but the log entry at 5.6566 s has not; the engine (Strict
// counts [5.6, 5.7) until 6.7 s) gives the unit back. An admission of 2 at
// 6.64 s must not be judged against the cancelled unit.
func TestReview6CancelAfterRefLeftWindow(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow} {
		e := advNew(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, DisableEviction: true})
		at := func(ms float64) time.Time { return advT0.Add(time.Duration(ms * float64(time.Millisecond))) }
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
		t.Logf("%v ref %v, 6.62 admitted %v, cancel %v, 6.64 admitted %v: %+v", alg, r.At().Sub(advT0), d0.Allowed, c, d.Allowed, rep)
		if rep.FalseAdmits != 0 && alg != engine.SlidingWindow {
			t.Errorf("%v: FalseAdmits %d (WorstWindow %v)", alg, rep.FalseAdmits, rep.WorstWindow)
		}
		if rep.Entries > 2 {
			t.Errorf("%v: Entries %d", alg, rep.Entries)
		}
	}
}
