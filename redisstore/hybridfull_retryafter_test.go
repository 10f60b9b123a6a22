package redisstore

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// WithHybrid: a local denial with the window full says so (Remaining < n)
// "with the RetryAfter of this replica's last exact denial on the key less
// the time since, a true lower bound (the first such denial is exact)".
// One replica fills a key (Limit 10, maxLocal 10: the allowance covers the
// whole limit) with units all in one sub-window, so the true wait is about
// the Window (a minute) and never one interval: the first denial is one
// script call, the next ones local, each RetryAfter well above the
// interval.
func TestHybridFullWindowDenialRetryAfter(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}
	l := mustNew(t, client(t, s), cfg, WithHybrid(20*time.Millisecond, 10), WithReplicas(1))
	for i := range 10 {
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("%d: %+v %v", i, d, err)
		}
	}
	before := l.Stats().RedisDecisions
	d, err := l.AllowN(ctx, "k", 1)
	if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter < 30*time.Second {
		t.Fatalf("first denial on the full key: %+v %v", d, err)
	}
	if got := l.Stats().RedisDecisions - before; got != 1 {
		t.Errorf("the first full-window denial made %d script calls, want 1 (exact)", got)
	}
	for _, n := range []int64{1, 2, 5} {
		d, err := l.AllowN(ctx, "k", n)
		if err != nil || d.Allowed || d.Remaining >= n {
			t.Fatalf("n=%d: %+v %v, want a full-window denial", n, d, err)
		}
		if d.RetryAfter < 30*time.Second {
			t.Errorf("n=%d: RetryAfter %v on a window full for about a minute (interval 20 ms)", n, d.RetryAfter)
		}
	}
}
