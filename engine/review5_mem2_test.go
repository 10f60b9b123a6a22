package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Reserve and cancel at one instant, many times: the units held never pass
// 1, yet the doc bounds a shadowed key's log by "one entry per admission
// still inside its window, so at most the units one window can admit ...
// L for Strict and the log".
func TestReview5AuditEntriesAfterCancels(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			const L = 100
			e := advNew(t, engine.Config{Limit: L, Window: time.Hour, Algorithm: alg, Audit: 1, DisableEviction: true})
			for i := 0; i < scaled(25_000, 200_000); i++ {
				r := e.ReserveAt("k", 1, advT0)
				if !r.Decision().Allowed {
					t.Fatalf("%d: %+v", i, r.Decision())
				}
				r.Cancel()
				if i%2000 == 0 {
					e.Audit()
				}
			}
			rep := e.Audit()
			t.Logf("%+v", rep)
			if rep.Dropped != 0 {
				t.Fatalf("dropped")
			}
			if rep.Entries > 2*L {
				t.Errorf("Entries = %d for one key holding 0 units (limit %d)", rep.Entries, L)
			}
			if rep.KeysSkipped != 0 {
				t.Errorf("the key lost its log: %+v", rep)
			}
		})
	}
}

// A key kept out by AuditMaxEntries: its reservations' cancels are counted
// as Unadmits and, worse, as UnadmitMissed ("units had already left the
// exact window at the key's newest time") although every unit is at the
// key's newest time, inside its window. Its decisions are Skipped, not in
// Decisions.
func TestReview5AuditSkippedKeyCancelsCounted(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := advNew(t, engine.Config{Limit: 100, Window: time.Hour, Algorithm: alg, Audit: 1, DisableEviction: true, AuditMaxKeys: 1})
			e.AllowAt("a", 1, advT0) // holds the only log
			var rs [10]engine.Reservation
			for i := range rs {
				rs[i] = e.ReserveAt("o", 1, advT0)
			}
			for i := range rs {
				if !rs[i].Cancel() {
					t.Fatal("cancel")
				}
			}
			rep := e.Audit()
			t.Logf("%+v", rep)
			if rep.KeysSkipped != 1 || rep.Skipped != 10 {
				t.Fatalf("setup: %+v", rep)
			}
			if rep.UnadmitMissed != 0 {
				t.Errorf("UnadmitMissed = %d: units at the key's newest time, inside its window, reported as having left it", rep.UnadmitMissed)
			}
			if rep.Unadmits > rep.Admits {
				t.Errorf("Unadmits = %d > Admits = %d: cancels counted for decisions that were Skipped (not in Decisions)", rep.Unadmits, rep.Admits)
			}
		})
	}
}

// The consequence: with AuditMaxEntries at 10·L, a key that never holds
// more than 1 unit loses its log (KeysSkipped) after 1,000 reserve+cancel
// pairs inside one window, and its decisions go unaudited.
func TestReview5AuditCancelsEvictLog(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			const L = 100
			e := advNew(t, engine.Config{Limit: L, Window: time.Hour, Algorithm: alg, Audit: 1, DisableEviction: true, AuditMaxEntries: 10 * L})
			for i := 0; i < 2000; i++ {
				r := e.ReserveAt("k", 1, advT0)
				r.Cancel()
			}
			rep := e.Audit()
			t.Logf("%+v", rep)
			if rep.KeysSkipped != 0 || rep.Skipped != 0 {
				t.Errorf("a key holding at most 1 of its %d units was refused its log by AuditMaxEntries = %d: %+v", L, 10*L, rep)
			}
		})
	}
}
