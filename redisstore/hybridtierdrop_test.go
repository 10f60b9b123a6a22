package redisstore

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// With Config.KeyLimit the bound is per key, and after a drop of a key's
// limit the allowances other replicas hold were sized on the old limit:
// until their next flush the general form holds with them (WithHybrid),
// not the simple form with the new limit (found by an adversarial pass:
// Q = 202 against the simple form's 16). The key's tier drops from 1,000
// to 10 while two replicas hold 100 units each admitted locally and not
// flushed (the interval is the Window: nothing flushes during the test
// whatever the machine's speed); a third replica then decides the key
// under the new tier. Q (every unit admitted) must stay within the new
// limit plus the two replicas' allowances, sized on headrooms of at most
// 1,000 − 1: 10 + 2 × ⌊999 / (3 × 3)⌋ = 232.
func TestHybridKeyLimitDropBound(t *testing.T) {
	s := redistest.Start(t)
	const R, maxLocal, oldLimit, newLimit = 3, 1, 1000, 10
	var tier atomic.Int64
	tier.Store(oldLimit)
	cfg := engine.Config{Limit: 100_000, Window: time.Hour, Algorithm: engine.SlidingWindowStrict, KeyLimit: func(string) int64 { return tier.Load() }}
	var ls [R]*Limiter
	for i := range ls {
		ls[i] = mustNew(t, client(t, s), cfg, WithHybrid(time.Hour, maxLocal), WithReplicas(R))
	}
	var q int64 // every unit admitted on the key so far
	for _, l := range ls[:2] {
		for i := 0; i < 100; i++ {
			d, err := l.AllowN(ctx, "k", 1)
			if err != nil || !d.Allowed {
				t.Fatalf("under the old tier: %+v %v", d, err)
			}
			q++
		}
	}
	tier.Store(newLimit)
	bound := int64(newLimit + (R-1)*max(maxLocal, (oldLimit-1)/(3*R)))
	var after int64
	for i := 0; i < 20; i++ {
		d, err := ls[2].AllowN(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			after++
			q++
			if q > bound {
				t.Errorf("admission %d under the new tier leaves Q = %d units, above the new limit plus the old allowances, %d: %+v", after, q, bound, d)
			}
		}
	}
	if after > newLimit {
		t.Errorf("the third replica admitted %d under the new tier, above its limit %d", after, newLimit)
	}
	for _, l := range ls {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := storedUnits(t, client(t, s), ls[0], "k"); got != q {
		t.Errorf("Redis holds %d units, want every one admitted (%d)", got, q)
	}
}
