package redisstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Issue 32, item 3: per-key limits (Config.KeyLimit: tiers) in the hybrid
// mode. One replica (WithReplicas(1)), flushes driven by the test, each
// tier's key pressed until its window is full: every key admits exactly its
// own limit, Redis holds exactly that, and the first local run after the
// key's exact first decision is the share of the key's own headroom,
// max(maxLocal, ⌊(limit − 2) / 3⌋) (the exact decision's unit is counted
// twice until a flush shows it), not of Config.Limit's.
func TestHybridKeyLimitExactOneReplica(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	tiers := map[string]int64{"free:a": 20, "pro:b": 300, "ent:c": 5000}
	const maxLocal = 5
	cfg := engine.Config{Limit: 100, Window: time.Minute, Algorithm: engine.SlidingWindowStrict, KeyLimit: func(k string) int64 { return tiers[k] }}
	l := mustNew(t, c, cfg, WithHybrid(5*time.Millisecond, maxLocal), WithReplicas(1), withManual())
	for key, limit := range tiers {
		var admitted, firstRun int64
		run := int64(-1) // the exact first decision is not in the first local run
		for flushes := 0; ; {
			d, err := l.AllowN(ctx, key, 1)
			if err != nil || d.Limit != limit {
				t.Fatalf("%s: %+v %v", key, d, err)
			}
			if d.Allowed {
				admitted++
				run++
				continue
			}
			if firstRun == 0 {
				firstRun = run
			}
			if d.Remaining == 0 {
				break // the window is full
			}
			if d.Remaining < 1 || d.RetryAfter != 5*time.Millisecond {
				t.Fatalf("%s: a refusal with room left that does not say the share is spent: %+v", key, d)
			}
			l.flushNow()
			run = 0
			if flushes++; flushes > 200 {
				t.Fatalf("%s: not full after 200 flushes (admitted %d)", key, admitted)
			}
		}
		l.flushNow()
		if admitted != limit {
			t.Errorf("%s: admitted %d, want its limit %d", key, admitted, limit)
		}
		if got := storedUnits(t, c, l, key); got != limit {
			t.Errorf("%s: Redis holds %d units, want %d", key, got, limit)
		}
		if want := max(maxLocal, (limit-2)/3); firstRun != want {
			t.Errorf("%s: the first local run admitted %d, want the share of its own headroom %d", key, firstRun, want)
		}
	}
}

// A change of a key's limit makes its next decision exact: the count a
// replica observed is clamped at the limit it was read with (Redis's
// Remaining is 0 from the limit up), so it says nothing under a higher
// one. Here another client fills the key to 90 while its limit is 50;
// raised to 100, the replica admits 10, not 50.
func TestHybridKeyLimitChangeIsExact(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	var limit atomic.Int64
	limit.Store(50)
	cfg := engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict, KeyLimit: func(string) int64 { return limit.Load() }}
	l := mustNew(t, c, cfg, WithHybrid(5*time.Millisecond, 10), WithReplicas(1), withManual())
	other := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	press := func() (admitted int64) {
		for range 300 {
			d, err := l.AllowN(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			} else if d.Remaining > 0 {
				l.flushNow() // the share is spent
			}
		}
		l.flushNow()
		return admitted
	}
	if got := press(); got != 50 {
		t.Fatalf("admitted %d under the limit 50", got)
	}
	if d, err := other.AllowN(ctx, "k", 40); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	// A refusal keeps the key in use, so the flush pulls it: the replica
	// observes the key with the limit 50, clamped at 50.
	if d, err := l.AllowN(ctx, "k", 1); err != nil || d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	l.flushNow()
	if k := l.hyb.keys["k"]; k == nil || !k.seen || k.est != 50 {
		t.Fatalf("the key's state after the pull: %+v, want an observation of 50", k)
	}
	limit.Store(100)
	if got := press(); got != 10 {
		t.Fatalf("admitted %d after the limit rose to 100 with 90 used, want 10", got)
	}
	if got := storedUnits(t, c, l, "k"); got != 100 {
		t.Fatalf("Redis holds %d units, want 100", got)
	}
}

// Several replicas with KeyLimit: the bound holds at every local admission
// with the key's own limit (500, under a Config.Limit of 100,000), and
// every allowance is sized against it (checkBound checks each against
// max(maxLocal, ⌊500 / (3 × replicas)⌋)).
func TestHybridKeyLimitBound(t *testing.T) {
	s := redistest.Start(t)
	cases := 0
	for _, r := range []int{2, 8} {
		for _, tr := range []string{"hammer", "smooth", "mixed"} {
			res := runBound(t, s, fmt.Sprintf("kl%d:", cases), r, 5*time.Millisecond, 10, tr, 200*time.Millisecond, 100_000)
			cases++
			t.Logf("R=%d %s: admitted %d of %d (%+d), largest allowance %d, max c %d, exact %d, slow flushes %d", r, tr, res.total, boundLimit, res.total-boundLimit, res.maxAllow, res.maxC, res.exact, res.slow)
			if t.Failed() {
				return
			}
		}
	}
}
