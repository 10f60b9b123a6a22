package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Reset deletes the key's state, for every replica, and keeps its limit.
func TestResetForgetsTheCount(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	cfg := engine.Config{Limit: 3, Window: time.Minute, KeyLimit: func(k string) int64 {
		if strings.HasPrefix(k, "pro:") {
			return 5
		}
		return 0
	}}
	a, b := mustNew(t, c, cfg), mustNew(t, c, cfg) // two replicas
	for _, key := range []string{"k", "pro:x", ""} {
		limit := a.cfg.Limit
		if key == "pro:x" {
			limit = 5
		}
		for i := int64(0); i < limit; i++ {
			if ok, err := a.Allow(ctx, key); !ok || err != nil {
				t.Fatalf("%q: admission %d: %v %v", key, i, ok, err)
			}
		}
		if ok, _ := b.Allow(ctx, key); ok {
			t.Fatalf("%q: the other replica admitted past the limit", key)
		}
		if err := b.Reset(ctx, key); err != nil {
			t.Fatal(err)
		}
		if n := c.Exists(ctx, a.Key(key)).Val(); n != 0 {
			t.Fatalf("%q: the Redis key is still there", key)
		}
		d, err := a.AllowN(ctx, key, limit)
		if err != nil || !d.Allowed || d.Limit != limit {
			t.Fatalf("%q after Reset: %+v %v, want the whole limit %d admitted", key, d, err, limit)
		}
	}
	if err := a.Reset(ctx, "never-seen"); err != nil {
		t.Fatal(err)
	}
	if err := a.Reset(ctx, strings.Repeat("x", a.Config().MaxKeyBytes+1)); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Failures != 0 {
		t.Fatalf("%+v", st)
	}
}

// An unreachable Redis: Reset returns an error wrapping ErrUnavailable,
// counted in Failures and passed to the OnError hook; the FallbackLocal
// engine's count is reset all the same. A caller whose context has ended
// gets its context's error, uncounted.
func TestResetFailsLoudly(t *testing.T) {
	var hook hookCounter
	l := mustNew(t, deadClient(t), engine.Config{Limit: 2, Window: time.Minute}, WithFallbackLocal(1), WithBreaker(0, 0), hook.opt())
	for i := 0; i < 3; i++ {
		_, _ = l.AllowN(ctx, "k", 1) // the fallback engine decides: 2 admitted
	}
	if d, _ := l.AllowN(ctx, "k", 1); d.Allowed {
		t.Fatalf("the fallback's count is full, %+v", d)
	}
	err := l.Reset(ctx, "k")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reset on a dead Redis: %v, want ErrUnavailable", err)
	}
	if st := l.Stats(); st.Failures != 5 || hook.n.Load() != 5 {
		t.Fatalf("Failures %d, hook %d: want the four decisions' and the Reset's", st.Failures, hook.n.Load())
	}
	if d, _ := l.AllowN(ctx, "k", 1); !d.Allowed {
		t.Fatalf("the fallback's count was not reset: %+v", d)
	}
	err = l.Reset(canceled(), "k")
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reset with a cancelled context: %v", err)
	}
	if st := l.Stats(); st.Failures != 6 {
		t.Fatalf("Failures %d: the cancelled Reset is not counted, the decision before it is", st.Failures)
	}
}

// Reset on a Cluster: the one DEL goes to the key's slot.
func TestResetOnCluster(t *testing.T) {
	servers := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(servers)})
	t.Cleanup(func() { _ = c.Close() })
	l := mustNew(t, c, engine.Config{Limit: 2, Window: time.Minute})
	for _, key := range []string{"a", "b", "tenant-{7}", ""} {
		for i := 0; i < 2; i++ {
			if ok, err := l.Allow(ctx, key); !ok || err != nil {
				t.Fatalf("%q: %v %v", key, ok, err)
			}
		}
		if err := l.Reset(ctx, key); err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		if d, err := l.AllowN(ctx, key, 2); !d.Allowed || err != nil {
			t.Fatalf("%q after Reset: %+v %v", key, d, err)
		}
	}
}

// A hybrid replica forgets its own units not yet sent, and decides the
// key exactly next.
func TestResetHybrid(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute}, WithHybrid(10*time.Millisecond, 5), withManual())
	if d, err := l.AllowN(ctx, "k", 6); !d.Allowed || err != nil { // exact: the first decision
		t.Fatalf("%+v %v", d, err)
	}
	l.flushNow() // observes the key: the next decisions are local
	for i := 0; i < 4; i++ {
		if d, _ := l.AllowN(ctx, "k", 1); !d.Allowed { // local, not sent
			t.Fatalf("local %d: %+v", i, d)
		}
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	l.flushNow() // nothing left to send
	if got := storedUnits(t, c, l, "k"); got != 0 {
		t.Fatalf("Redis holds %d units after the Reset and a flush", got)
	}
	before := l.Stats().RedisDecisions
	if d, err := l.AllowN(ctx, "k", 10); !d.Allowed || err != nil {
		t.Fatalf("after Reset: %+v %v", d, err)
	}
	if l.Stats().RedisDecisions != before+1 {
		t.Fatal("the decision after a Reset is exact")
	}
}
