package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The empty user key in a Cluster: its probe key (same "hash tag" {}) lands on
// another node, so while the key's node is down the breaker is closed by a
// probe that succeeds elsewhere, and reopens on the next decision.
func TestReview4EmptyKeyClusterBreaker(t *testing.T) {
	for _, uk := range []string{"", "control"} {
		t.Run(uk, func(t *testing.T) { advClusterBreaker(t, uk) })
	}
}

func advClusterBreaker(t *testing.T, uk string) {
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr()}, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	defer cc.Close()
	ctx := context.Background()
	var l *Limiter
	var owner, probeOwner string
	for w := 1; w < 30; w++ {
		l2, err := New(cc, engine.Config{Limit: 1 << 20, Window: time.Duration(w) * time.Second, Algorithm: engine.SlidingWindowStrict})
		if err != nil {
			t.Fatal(err)
		}
		a, err1 := cc.MasterForKey(ctx, l2.Key(uk))
		b, err2 := cc.MasterForKey(ctx, l2.Key(uk)+":probe")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if (uk == "" && a.Options().Addr != b.Options().Addr) || uk != "" {
			l, owner, probeOwner = l2, a.Options().Addr, b.Options().Addr
			break
		}
		l2.Close()
	}
	if l == nil {
		t.Skip("no geometry found")
	}
	defer l.Close()
	t.Logf("key %q on %s, its probe key on %s", l.Key(uk), owner, probeOwner)
	if _, err := l.AllowN(ctx, uk, 1); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Addr() == owner {
			n.Kill()
		}
	}
	end := time.Now().Add(1500 * time.Millisecond)
	calls := 0
	for time.Now().Before(end) {
		cx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, _ = l.AllowN(cx, uk, 1)
		cancel()
		calls++
		time.Sleep(5 * time.Millisecond)
	}
	st := l.Stats()
	t.Logf("%d calls while the node was down: %+v", calls, st)
	// Correct breaker: one opening, probes at doubling intervals up to 500ms:
	// a handful of failures.
	if st.BreakerOpens > 2 {
		t.Errorf("the breaker reopened %d times while the key's node stayed down: closed by probes on another node", st.BreakerOpens)
	}
}
