package redisstore

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// WithHybrid: "a change of a key's limit makes its next decision exact".
// A tier that flips between 100 and 200 on every call: each decision
// after a flip is one script call, and Redis holds every unit admitted.
// Then the tier held at 200: the decisions go local again.
func TestHybridTierFlipEachDecisionExact(t *testing.T) {
	s := redistest.Start(t)
	var tier atomic.Int64
	tier.Store(100)
	cfg := engine.Config{Limit: 1000, Window: time.Minute, KeyLimit: func(string) int64 { return tier.Load() }}
	l := mustNew(t, client(t, s), cfg, WithHybrid(time.Minute, 5), WithReplicas(1))
	for i := range 3 { // the first decision is exact, the next local
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("%d: %+v %v", i, d, err)
		}
	}
	admitted := int64(3)
	for i := range 20 {
		tier.Store(100 + 100*int64(i%2^1))
		before := l.Stats().RedisDecisions
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil || !d.Allowed || d.Limit != tier.Load() {
			t.Fatalf("flip %d: %+v %v", i, d, err)
		}
		admitted++
		if got := l.Stats().RedisDecisions - before; got != 1 {
			t.Errorf("flip %d to %d: %d script calls, want the decision exact", i, tier.Load(), got)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := storedUnits(t, client(t, s), l, "k"); got != admitted {
		t.Errorf("Redis holds %d units, want %d", got, admitted)
	}
}
