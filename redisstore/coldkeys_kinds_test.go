package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// "A key used once costs one script call", whatever its one decision was:
// one unit, n = 0, a cost above maxLocal, or a refusal (the key full from
// another replica's exact decisions). 400 keys decided once each by a
// hybrid limiter whose flusher runs on its own (5 ms); once it has flushed
// five times more and closed, Redis has run at most 400 script calls for
// them (INFO commandstats). The flushes' count is waited for, not a time.
func TestHybridColdKeysOneCallWhateverTheDecision(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	cfg := engine.Config{Limit: 10, Window: time.Minute, KeyLimit: func(key string) int64 {
		if key == "hot" {
			return 1_000_000 // decided on until each flush below, however many times that takes
		}
		return 0 // Config.Limit
	}}
	filler := mustNew(t, client(t, s), cfg, WithHybrid(5*time.Millisecond, 3))
	for i := range 100 {
		if d, err := filler.AllowN(ctx, "full"+strconv.Itoa(i), 10); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	if err := filler.Close(); err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, client(t, s), cfg, WithHybrid(5*time.Millisecond, 3))
	resetCalls(t, c)
	for i := range 100 {
		k := strconv.Itoa(i)
		for _, call := range []struct {
			key   string
			n     int64
			admit bool
		}{{"one" + k, 1, true}, {"zero" + k, 0, true}, {"big" + k, 5, true}, {"full" + k, 1, false}} {
			if d, err := l.AllowN(ctx, call.key, call.n); err != nil || d.Allowed != call.admit {
				t.Fatalf("%s n=%d: %+v %v", call.key, call.n, d, err)
			}
		}
	}
	// A hot key keeps the flusher busy: five flushes that carry it, each
	// one script call for it, beside its exact decisions (its first, and
	// any after it idled for an interval). It is decided on until each
	// flush comes: a flush carries only units decided locally, and on a
	// starved machine a decision may come an interval after the one
	// before, and be exact.
	for range 5 {
		f0 := l.Stats().Flushes
		waitUntil(t, "a flush", func() bool {
			if d, err := l.AllowN(ctx, "hot", 1); err != nil || !d.Allowed {
				t.Fatalf("hot: %+v %v", d, err)
			}
			return l.Stats().Flushes > f0
		}, func() any { return l.Stats() })
	}
	// The hot key's last local units go in a regular flush, not in Close's
	// last one, which counts once in Flushes however many script calls
	// it makes (a key's unconfirmed batch and its pending units are two).
	waitUntil(t, "the hot key's units flushed", func() bool {
		l.hyb.mu.Lock()
		defer l.hyb.mu.Unlock()
		k := l.hyb.keys["hot"]
		return k == nil || k.pending+k.batch == 0
	}, func() any { return l.Stats() })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if calls, want := scriptCalls(t, c), int64(st.RedisDecisions+st.Flushes); calls > want {
		t.Errorf("%d script calls, want ≤ %d: 400 decisions on 400 keys used once, and a hot key's %d exact decisions and %d flushes (stats %+v)", calls, want, st.RedisDecisions-400, st.Flushes, st)
	}
}
