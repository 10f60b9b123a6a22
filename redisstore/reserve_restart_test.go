package redisstore

// A reservation whose state Redis lost (a restart, an eviction, a
// failover) gives nothing back to the state created afresh: docs/design.md
// §12, "Incarnations".

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// docs/design.md §12, "A cancel": "a state created afresh under a monotonic
// TIME has l ≥ x + N + 1, which the condition refuses", and the invariant
// "a count never drops below what is live ... no admission passes the limit
// because of a cancel". A redis-server restarted without persistence (the
// helpers' servers persist nothing; a crash of a cache-configured Redis)
// creates the key's state afresh within the same sub-window, with no reset
// mark: a reservation held across the restart then cancels into the fresh
// count, which takes other, live reservations' units.
func TestCancelAcrossRestartRefundsNothing(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	// Two sub-windows of 30 s: the restart stays inside one sub-window.
	l := mustNew(t, c, engine.Config{Limit: 2, Window: time.Minute, SubWindows: 2, Algorithm: engine.SlidingWindowStrict})
	old, err := l.Reserve(ctx, "k", 1)
	if err != nil || old.Units() != 1 {
		t.Fatal(old, err)
	}
	s.Kill()
	s.Start()
	waitUntil(t, "a reconnect", func() bool { return c.Ping(ctx).Err() == nil }, func() any { return nil })
	waitUntil(t, "the breaker closed", func() bool { _, err := l.AllowN(ctx, "probe", 0); return err == nil }, func() any { return l.Stats() })
	// Two live reservations fill the fresh count to the limit.
	for i := range 2 {
		r, err := l.Reserve(ctx, "k", 1)
		if err != nil || !r.Decision().Allowed {
			t.Fatalf("fresh reservation %d: %+v %v", i, r.Decision(), err)
		}
	}
	ok, err := old.Cancel(ctx)
	third, err2 := l.Reserve(ctx, "k", 1)
	if err != nil || err2 != nil {
		t.Fatal(err, err2)
	}
	if ok || third.Decision().Allowed {
		t.Fatalf("a reservation from before the restart cancelled into the fresh count (Cancel %v), and a third request was admitted (%v) while 2 live reservations hold the limit of 2", ok, third.Decision().Allowed)
	}
}
