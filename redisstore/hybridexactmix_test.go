package redisstore

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A key far below its limit is admitted locally however hot it is
// (WithHybrid), also when the replica's traffic on it mixes costs above
// maxLocal (exact decisions) with small ones: one replica (WithReplicas(1)),
// Limit 10,000, 100 calls of 2 units (exact) then 1,000 of 1 unit, 12% of
// the limit in all. The interval is the Window: no flush renews the share
// during the test, whatever the machine's speed, so every admission is the
// allowance's doing.
func TestHybridExactCostsDoNotStarveLocal(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Limit: 10_000, Window: time.Minute}, WithHybrid(time.Minute, 1), WithReplicas(1))
	for i := 0; i < 100; i++ {
		if d, err := l.AllowN(ctx, "k", 2); err != nil || !d.Allowed {
			t.Fatalf("exact %d: %+v %v", i, d, err)
		}
	}
	var admitted int
	var first engine.Decision
	for i := 0; i < 1000; i++ {
		oneUnit(t, l, "k", &admitted, &first)
	}
	if admitted < 990 {
		t.Errorf("key at 12%% of its limit: admitted %d of 1,000 one-unit calls after 100 exact ones; first denial %+v; stats %+v", admitted, first, l.Stats())
	}
	// Interleaved: each exact call followed by ten small ones.
	admitted, first = 0, engine.Decision{}
	for i := 0; i < 100; i++ {
		if d, err := l.AllowN(ctx, "m", 2); err != nil || !d.Allowed {
			t.Fatalf("exact %d: %+v %v", i, d, err)
		}
		for j := 0; j < 10; j++ {
			oneUnit(t, l, "m", &admitted, &first)
		}
	}
	if admitted < 990 {
		t.Errorf("interleaved, key at 12%% of its limit: admitted %d of 1,000 one-unit calls; first denial %+v; stats %+v", admitted, first, l.Stats())
	}
}

// oneUnit decides one unit of key, counting it in admitted, and keeps
// the first denial in first.
func oneUnit(t *testing.T, l *Limiter, key string, admitted *int, first *engine.Decision) {
	t.Helper()
	d, err := l.AllowN(ctx, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		*admitted++
	} else if first.Limit == 0 {
		*first = d
	}
}
