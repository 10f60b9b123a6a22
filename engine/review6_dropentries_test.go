package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Promise (README "Memory, bounded"; design §9): a shadowed key's log holds
// at most the units one window can admit (L for Strict and the log), and
// "cancelled reservations leave nothing in the log". A sequential caller:
// reserve 1, decisions that fill the buffer, Cancel (its unadmit finds the
// buffer full), drain; repeated 50 times inside one window at L = 1.
func TestReview6DroppedUnadmitsGrowLogPastL(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := advNew(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
		for i := 0; i < 50; i++ {
			at := advMs(advT0, i)
			r := e.ReserveAt("k", 1, at)
			if !r.Decision().Allowed {
				t.Fatalf("%v: reserve %d denied", alg, i)
			}
			for q := 0; q < 100; q++ {
				e.AllowAt("k", 1, at)
			}
			if !r.Cancel() {
				t.Fatal("cancel")
			}
			e.Audit()
		}
		rep := e.Audit()
		t.Logf("%v %+v", alg, rep)
		if rep.Entries > 1 {
			t.Errorf("%v: Entries = %d for one key at L = 1 (no reservation is held)", alg, rep.Entries)
		}
	}
}

// Same, with AuditMaxEntries 32: the cancelled reservations' leftovers push
// the key (which holds nothing) out of the audit, the failure the design
// says removing emptied entries fixed.
func TestReview6DroppedUnadmitsPushKeyOut(t *testing.T) {
	e := advNew(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: engine.SlidingWindowStrict, Audit: 1, AuditBuffer: 64, AuditMaxEntries: 32, DisableEviction: true})
	for i := 0; i < 100; i++ {
		at := advMs(advT0, i)
		r := e.ReserveAt("k", 1, at)
		for q := 0; q < 100; q++ {
			e.AllowAt("k", 1, at)
		}
		r.Cancel()
		e.Audit()
	}
	rep := e.Audit()
	t.Logf("%+v", rep)
	if rep.KeysSkipped != 0 || rep.Entries > 1 {
		t.Errorf("KeysSkipped %d, Entries %d: a key holding no reservation was pushed out by cancelled ones", rep.KeysSkipped, rep.Entries)
	}
}
