package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Strict, L = 1: a reservation, a full buffer, its Cancel (unadmit and
// settle dropped), then an admission into the freed room.
func TestReview6DroppedUnadmitThenAdmit(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := advNew(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
		r := e.ReserveAt("k", 1, advT0)
		for q := 0; q < 100; q++ {
			e.AllowAt("k", 1, advT0)
		}
		if !r.Cancel() {
			t.Fatal("cancel")
		}
		e.Audit()
		d := e.AllowAt("k", 1, advMs(advT0, 1))
		rep := e.Audit()
		t.Logf("%v %v %+v", alg, d.Allowed, rep)
		if rep.FalseAdmits != 0 {
			t.Errorf("%v: false admit", alg)
		}
	}
}
