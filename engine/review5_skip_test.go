package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// One key kept out by AuditMaxKeys for many windows, "a" holding the only
// log all along: it is counted "once while it stays out".
func TestReview5KeysSkippedStaysOut(t *testing.T) {
	e := advNew(t, engine.Config{Limit: 100, Window: time.Second, SubWindows: 4, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
	decisions := 0
	for ms := 0; ms < 10_000; ms += 100 {
		now := advMs(advT0, ms)
		e.AllowAt("a", 1, now)
		e.AllowAt("o", 1, now)
		decisions++
		if ms%700 == 0 {
			e.Audit()
		}
	}
	r := e.Audit()
	t.Logf("%+v", r)
	if r.Skipped != int64(decisions) {
		t.Errorf("Skipped = %d, want %d", r.Skipped, decisions)
	}
	if r.KeysSkipped != 1 {
		t.Errorf("KeysSkipped = %d, want 1: one key, out the whole time", r.KeysSkipped)
	}
}

// Beyond the remembered keys KeysSkipped is a lower bound: it must never
// exceed the number of distinct keys kept out (each kept out the whole
// time, while "a" holds the only log).
func TestReview5KeysSkippedLowerBound(t *testing.T) {
	for _, cfg := range []struct{ maxKeys, others int }{{1, 5000}, {1, 4096}, {1, 4097}, {5000, 12000}} {
		t.Run(fmt.Sprint(cfg), func(t *testing.T) {
			e := advNew(t, engine.Config{Limit: 1000, Window: time.Second, SubWindows: 4, Audit: 1, AuditMaxKeys: cfg.maxKeys, DisableEviction: true, AuditBuffer: 1 << 20})
			for i := 0; i < cfg.maxKeys; i++ {
				e.AllowAt(fmt.Sprint("a", i), 1, advT0)
			}
			var dec int64
			for round := 0; round < 6; round++ {
				now := advMs(advT0, round*600)
				for i := 0; i < cfg.maxKeys; i++ {
					e.AllowAt(fmt.Sprint("a", i), 1, now)
				}
				for i := 0; i < cfg.others; i++ {
					e.AllowAt(fmt.Sprint("o", i), 1, now)
					dec++
				}
				e.Audit()
			}
			r := e.Audit()
			t.Logf("%+v", r)
			if r.Dropped != 0 {
				t.Fatalf("dropped")
			}
			if r.Skipped != dec {
				t.Errorf("Skipped = %d, want %d", r.Skipped, dec)
			}
			if r.KeysSkipped > int64(cfg.others) {
				t.Errorf("KeysSkipped = %d: more than the %d distinct keys ever kept out (a lower bound, said the doc)", r.KeysSkipped, cfg.others)
			}
			if r.Keys > cfg.maxKeys {
				t.Errorf("Keys %d over the cap", r.Keys)
			}
		})
	}
}
