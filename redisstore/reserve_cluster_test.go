package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// In a Cluster, every reservation call touches one key, in its key's slot:
// reserve, cancel, settle to fewer and to more, and charge run on keys
// spread over every node (braces in user keys included) with no CROSSSLOT
// or MOVED surfacing, and each key ends holding exactly what was settled.
func TestClusterReserve(t *testing.T) {
	t.Parallel() // waits mostly on cluster set-up
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes), MaxRetries: -1})
	defer cc.Close()
	l := mustNew(t, cc, engine.Config{Limit: 6, Window: time.Minute, SubWindows: 6, Algorithm: engine.SlidingWindowStrict})
	var keys []string
	for i := range 60 {
		k := fmt.Sprintf("tenant-%d", i)
		if i%4 == 0 {
			k = fmt.Sprintf("{t%d}x{", i)
		}
		keys = append(keys, k)
		a, err := l.Reserve(ctx, k, 3)
		if err != nil || a.Units() != 3 {
			t.Fatalf("key %q: Reserve: %+v %v", k, a, err)
		}
		b, err := l.Reserve(ctx, k, 3)
		if err != nil || b.Units() != 3 {
			t.Fatalf("key %q: Reserve: %+v %v", k, b, err)
		}
		if ok, err := a.Cancel(ctx); !ok || err != nil {
			t.Fatalf("key %q: Cancel: %v %v", k, ok, err)
		}
		if _, err := b.Settle(ctx, 1); err != nil {
			t.Fatalf("key %q: Settle: %v", k, err)
		}
		c, err := l.Reserve(ctx, k, 2)
		if err != nil || c.Units() != 2 {
			t.Fatalf("key %q: Reserve: %+v %v", k, c, err)
		}
		if _, err := c.Settle(ctx, 4); err != nil {
			t.Fatalf("key %q: Settle: %v", k, err)
		}
		d, err := l.ChargeN(ctx, k, 2)
		if err != nil || d.Allowed || d.Remaining != 0 {
			t.Fatalf("key %q: ChargeN to 7 of 6: %+v %v, want the debt to refuse", k, d, err)
		}
	}
	for _, k := range keys {
		if got := storedUnits(t, cc, l, k); got != 7 {
			t.Fatalf("key %q holds %d units, want 1 + 4 + 2", k, got)
		}
	}
	var used int
	for _, s := range nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		n, err := c.DBSize(ctx).Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			used++
		}
	}
	if used != len(nodes) {
		t.Fatalf("keys on %d of %d nodes", used, len(nodes))
	}
}
