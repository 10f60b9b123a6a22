package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A caller with a deadline leaves while its exact decision (a cost above
// maxLocal) is in flight: it is not admitted, and Redis may have counted
// its units (AllowN). Here Redis does count them (the path held the call
// until the caller had left). Once Redis has run it and a later exact
// decision on another key has come back, the replica's local decisions on
// the key must keep the bound, with one replica (WithReplicas(1))
// Q ≤ Limit: the units Redis counted for the gone caller take room.
func TestHybridCallerGoneUnitsTakeRoom(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	w := &writeSignal{mark: []byte("{victim}")}
	c := watchedClient(t, p, w)
	direct := client(t, s)
	const limit = 10
	cfg := engine.Config{Limit: limit, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}
	l := mustNew(t, c, cfg, WithHybrid(time.Minute, 1), WithReplicas(1))
	if d, err := l.AllowN(ctx, "victim", 1); err != nil || !d.Allowed {
		t.Fatalf("first decision: %+v %v", d, err)
	}
	sent := w.arm()
	heal := p.blackhole()
	defer heal()
	dctx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Hour))
	done := make(chan error, 1)
	go func() {
		d, err := l.AllowN(dctx, "victim", 8)
		if d.Allowed {
			t.Errorf("a caller gone admitted: %+v %v", d, err)
		}
		done <- err
	}()
	select {
	case <-sent:
	case <-time.After(hangBound):
		t.Fatal("the call never went out")
	}
	cancel()
	t.Logf("gone caller: %v", <-done)
	heal()
	waitUntil(t, "Redis counting the 8 units", func() bool { return storedUnits(t, direct, l, "victim") == 9 }, func() any { return l.Stats() })
	if d, err := l.AllowN(ctx, "other", 1); err != nil || !d.Allowed { // a later round trip, back
		t.Fatalf("other: %+v %v", d, err)
	}
	q := int64(9)
	for range 5 {
		if d, err := l.AllowN(ctx, "victim", 1); err == nil && d.Allowed {
			q++
		}
	}
	if q > limit {
		t.Errorf("one replica: Q = %d in the window, above its Limit %d (Redis counted the gone caller's 8, then %d admitted; stats %+v)", q, limit, q-9, l.Stats())
	}
}
