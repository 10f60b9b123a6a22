package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// KeysSkipped "counts sampled keys that were refused a log, or lost
// theirs"; Skipped counts their decisions. AuditMaxKeys = 1: "a" gets the
// log, the other keys are refused one, 5 decisions each, all inside one
// window.
func TestReview4AuditKeysSkippedCountsKeys(t *testing.T) {
	for _, others := range []int{1, 2, 3, 10} {
		t.Run(fmt.Sprint(others), func(t *testing.T) {
			e := advNew(t, engine.Config{Limit: 100, Window: time.Second, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
			e.AllowAt("a", 1, advT0)
			for k := 0; k < others; k++ {
				for i := 0; i < 5; i++ {
					e.AllowAt(fmt.Sprint("o", k), 1, advMs(advT0, i))
				}
			}
			r := e.Audit()
			t.Logf("%+v", r)
			if r.Skipped != int64(5*others) {
				t.Errorf("Skipped = %d, want %d", r.Skipped, 5*others)
			}
			if r.KeysSkipped != int64(others) {
				t.Errorf("KeysSkipped = %d, want %d (keys refused a log)", r.KeysSkipped, others)
			}
		})
	}
}

// Caps: Keys ≤ AuditMaxKeys and Entries ≤ AuditMaxEntries at every report,
// and a key that lost its log is never judged on an incomplete one
// (Strict: no false admits; log: no false decisions at all).
func TestReview4AuditCapsRandom(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		for _, caps := range [][2]int{{1, 1}, {2, 3}, {3, 10}, {50, 7}} {
			t.Run(fmt.Sprint(alg, caps), func(t *testing.T) {
				e := advNew(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1,
					AuditMaxKeys: caps[0], AuditMaxEntries: int64(caps[1]), DisableEviction: true})
				now := advT0
				for i := 0; i < 3000; i++ {
					now = now.Add(time.Duration((i*7919)%97) * time.Millisecond / 3)
					key := fmt.Sprint("k", (i*31)%5)
					e.AllowAt(key, int64(1+(i*13)%3), now)
					if i%50 == 0 {
						r := e.Audit()
						if r.Keys > caps[0] || r.Entries > int64(caps[1]) {
							t.Fatalf("over the caps: %+v", r)
						}
					}
				}
				r := e.Audit()
				t.Logf("%+v", r)
				advConsistent(t, r)
				if r.FalseAdmits != 0 || (alg == engine.SlidingLog && r.FalseDenies != 0) {
					t.Errorf("judged on an incomplete log: %+v", r)
				}
			})
		}
	}
}
