package redisstore

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// "A cost above maxLocal goes to Redis as one exact script call, which
// counts this replica's unrecorded units as present, so it is refused only
// when the window has no room for it, with a RetryAfter that is never
// Never." The room left is Limit less the units recorded and unrecorded;
// the refusal's Remaining says it, and its RetryAfter is when the units in
// the way leave the window (they are all in its newest sub-window here, so
// about one Window), not zero: a caller retrying at once is refused again.
func TestHybridCostAboveMaxLocalRefusal(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}
	l := mustNew(t, client(t, s), cfg, WithHybrid(time.Minute, 2), WithReplicas(1))
	for i := 0; i < 3; i++ { // one exact, two local (unrecorded)
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("%d: %+v %v", i, d, err)
		}
	}
	if st := l.Stats(); st.LocalDecisions != 2 {
		t.Fatalf("want two local admissions: %+v", st)
	}
	d, err := l.AllowN(ctx, "k", 8)
	if err != nil || d.Allowed {
		t.Fatalf("8 units with 3 admitted of 10: %+v %v, want refused", d, err)
	}
	if d.Remaining != 7 || d.RetryAfter < time.Second || d.RetryAfter == engine.Never {
		t.Errorf("refusal of a cost above maxLocal: Remaining %d (want 7), RetryAfter %v (want about the Window)", d.Remaining, d.RetryAfter)
	}
	d, err = l.AllowN(ctx, "k", 7)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("7 units, which fit exactly: %+v %v", d, err)
	}
}
