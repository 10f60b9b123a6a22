package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// "A key kept out of the logs by a cap counts no cancels"; KeysSkipped
// counts each refusal once; Unadmits ≤ successful cancels of audited keys.
func TestReview6CapKeyCancels(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow} {
		e := advNew(t, engine.Config{Limit: 3, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
		e.AllowAt("a", 1, advT0)
		e.Audit()
		// b: refused a log. Reserve, cancel, reserve, cancel inside one window.
		var ok int
		for i := 0; i < 5; i++ {
			r := e.ReserveAt("b", 1, advMs(advT0, 10*i))
			if r.Cancel() {
				ok++
			}
		}
		rep := e.Audit()
		t.Logf("%v %+v", alg, rep)
		if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
			t.Errorf("%v: skipped key counted cancels: Unadmits %d Missed %d", alg, rep.Unadmits, rep.UnadmitMissed)
		}
		if rep.KeysSkipped != 1 {
			t.Errorf("%v: KeysSkipped = %d, want 1 (one refusal)", alg, rep.KeysSkipped)
		}
		// a's log idles out (two windows), b comes back after its units left: gets the log.
		r := e.ReserveAt("b", 1, advMs(advT0, 3500))
		if !r.Cancel() {
			t.Fatal("cancel")
		}
		rep2 := e.Audit()
		t.Logf("%v %+v", alg, rep2)
		if rep2.Unadmits > 1 {
			t.Errorf("%v: Unadmits %d > 1 successful audited cancel", alg, rep2.Unadmits)
		}
		if rep2.Entries != 0 {
			t.Errorf("%v: Entries %d after the only reservation was cancelled", alg, rep2.Entries)
		}
		advConsistent(t, rep2)
	}
}
