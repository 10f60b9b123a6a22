package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// "o" is refused a log at 0, then comes back at 3 s, 6 s, 9 s, each time
// refused again ("a" holds the only log throughout). Each refusal comes
// after the previous one's units left the window, so each is a refusal
// anew: KeysSkipped counts 4, as AuditReport documents (the second review
// asked whether it meant 1; the doc now says which).
func TestReview5KeysSkippedGap(t *testing.T) {
	e := advNew(t, engine.Config{Limit: 100, Window: time.Second, SubWindows: 4, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
	for ms := 0; ms < 10_000; ms += 100 {
		e.AllowAt("a", 1, advMs(advT0, ms))
		if ms%3000 == 0 {
			e.AllowAt("o", 1, advMs(advT0, ms))
		}
	}
	r := e.Audit()
	t.Logf("%+v", r)
	if r.KeysSkipped != 4 || r.Skipped != 4 {
		t.Errorf("KeysSkipped = %d, Skipped = %d for one key refused 4 times, each a window after the last", r.KeysSkipped, r.Skipped)
	}
}
