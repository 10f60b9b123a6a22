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

// A redis-server restarted without persistence (the helpers' servers
// persist nothing; a crash of a cache-configured Redis) loses the state and
// its mark; the next reservation creates both afresh within the same
// sub-window. A reservation held across the restart must give nothing back
// to that count, which holds other, live reservations' units: a third
// reservation is refused while two hold the limit of 2.
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

// The state lost alone (an eviction of the state key, its mark kept), then
// created again by a reservation, or by a charge: a new incarnation, and
// the older reservation gives nothing back. The mark lost alone: the next
// reservation sets a new one, and the older one gives nothing back (a
// false refusal at worst).
func TestCancelAfterStateOrMarkLostRefundsNothing(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 2, Window: time.Hour, SubWindows: 2, Algorithm: engine.SlidingWindowStrict})
	for _, tc := range []struct {
		name  string
		lose  string // the Redis key deleted: the state, or its mark
		again func(key string)
	}{
		{"state, then Reserve", "", func(key string) {
			if r, err := l.Reserve(ctx, key, 1); err != nil || r.Units() != 1 {
				t.Fatal(r.Decision(), err)
			}
		}},
		{"state, then ChargeN", "", func(key string) {
			if _, err := l.ChargeN(ctx, key, 1); err != nil {
				t.Fatal(err)
			}
		}},
		{"mark, then Reserve", resetSuffix, func(key string) {
			if r, err := l.Reserve(ctx, key, 1); err != nil || r.Units() != 1 {
				t.Fatal(r.Decision(), err)
			}
		}},
	} {
		key := tc.name
		old, err := l.Reserve(ctx, key, 1)
		if err != nil || old.Units() != 1 {
			t.Fatal(old.Decision(), err)
		}
		if tc.lose == "" {
			if err := c.Del(ctx, l.Key(key)).Err(); err != nil {
				t.Fatal(err)
			}
		} else if err := c.Del(ctx, l.Key(key)+tc.lose).Err(); err != nil {
			t.Fatal(err)
		}
		tc.again(key)
		ok, err := old.Cancel(ctx)
		if err != nil || ok {
			t.Fatalf("%s: Cancel of a reservation from another incarnation: %v %v, want false", tc.name, ok, err)
		}
		// the count: 1 after the lost state (the unit of tc.again), 2 after the lost mark
		want := int64(1)
		if tc.lose != "" {
			want = 2
		}
		if got := storedUnits(t, c, l, key); got != want {
			t.Fatalf("%s: Redis holds %d units after the Cancel, want %d", tc.name, got, want)
		}
	}
}
