package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// KeysSkipped "once per refusal, which lasts until the key's unlogged units
// have left the window (a key refused again after that counts again)".
// Cancelled reservations of the refused key must not extend or split it.
func TestReview6KeysSkippedPerRefusal(t *testing.T) {
	e := advNew(t, engine.Config{Limit: 3, Window: time.Second, SubWindows: 10, Algorithm: engine.SlidingWindowStrict, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
	keepA := func(ms int) { e.AllowAt("a", 1, advMs(advT0, ms)) }
	keepA(0)
	e.Audit()
	r := e.ReserveAt("b", 1, advMs(advT0, 10)) // refusal 1
	keepA(300)
	r.Cancel()
	e.AllowAt("b", 1, advMs(advT0, 500)) // same refusal
	keepA(900)
	rep := e.Audit()
	if rep.KeysSkipped != 1 {
		t.Errorf("after one refusal: KeysSkipped %d", rep.KeysSkipped)
	}
	keepA(1400)
	keepA(1600)
	e.AllowAt("b", 1, advMs(advT0, 1700)) // b's units (0.5 s) have left: refusal 2
	keepA(1800)
	rep = e.Audit()
	t.Logf("%+v", rep)
	if rep.KeysSkipped != 2 {
		t.Errorf("after two refusals: KeysSkipped %d", rep.KeysSkipped)
	}
	if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
		t.Errorf("skipped key's cancel counted: %d/%d", rep.Unadmits, rep.UnadmitMissed)
	}
}
