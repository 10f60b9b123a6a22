package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The failure policies answer for a token bucket as for a window: FailClosed
// denies with RetryAfter one emission interval, FailOpen admits, each with
// Limit the bucket's capacity and an error wrapping ErrUnavailable; n above
// the capacity is refused with Never and no error. FallbackLocal needs the
// engine's token bucket; until the engine runs one, New says so.
func TestTokenBucketFailurePolicies(t *testing.T) {
	c := deadClient(t)
	cfg := engine.Config{Algorithm: engine.TokenBucket, Limit: 3, Burst: 5, Window: time.Second}
	const T = time.Second / 3
	for _, tc := range []struct {
		opt  Option
		want engine.Decision
	}{
		{WithFailurePolicy(FailClosed), engine.Decision{Limit: 5, RetryAfter: T + 1}}, // ⌈1 s / 3⌉
		{WithFailurePolicy(FailOpen), engine.Decision{Allowed: true, Limit: 5, Remaining: 3}},
	} {
		l := mustNew(t, c, cfg, tc.opt, WithBreaker(time.Minute, time.Minute))
		for range 3 { // a round trip that fails, then the open breaker's answers
			d, err := l.AllowN(ctx, "k", 2)
			if !errors.Is(err, ErrUnavailable) || d != tc.want {
				t.Fatalf("%+v: %v, want %+v and ErrUnavailable", d, err, tc.want)
			}
		}
		if d, err := l.AllowN(ctx, "k", 6); err != nil || d != (engine.Decision{Limit: 5, RetryAfter: engine.Never}) {
			t.Fatalf("6 units of a bucket of 5: %+v %v", d, err)
		}
	}
	// FallbackLocal: the engine's token bucket holding the share, here a
	// bucket of ⌊0.5·5⌋ = 2 at ⌊0.5·3⌋ = 1 per second.
	l := mustNew(t, c, cfg, WithFallbackLocal(0.5), WithBreaker(time.Minute, time.Minute))
	for i, st := range []struct {
		n    int64
		want engine.Decision
	}{
		{2, engine.Decision{Allowed: true, Limit: 2}},
		{1, engine.Decision{Limit: 2}},                    // RetryAfter: about 1 s, from the local clock
		{3, engine.Decision{Limit: 2, RetryAfter: T + 1}}, // above the share, within the bucket: not Never
	} {
		d, err := l.AllowN(ctx, "k", st.n)
		if i == 1 && d.RetryAfter > 900*time.Millisecond && d.RetryAfter <= time.Second {
			d.RetryAfter = 0
		}
		if !errors.Is(err, ErrUnavailable) || d != st.want {
			t.Fatalf("FallbackLocal, %d units: %+v %v, want %+v and ErrUnavailable", st.n, d, err, st.want)
		}
	}
}

// The breaker for a token bucket, for real: Ping runs (the probe writes
// its own key), a killed server opens the breaker and the policy answers
// (FailClosed: denied, RetryAfter one emission interval, ErrUnavailable)
// without round trips, and after a restart decisions come from Redis
// again. No timing is asserted.
func TestTokenBucketBreakerRecovers(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 1_000_000, Burst: 1000, Window: time.Second})
	if err := l.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	s.Kill()
	waitUntil(t, "the breaker to open", func() bool {
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil && (!errors.Is(err, ErrUnavailable) || d != (engine.Decision{Limit: 1000, RetryAfter: time.Microsecond})) {
			t.Fatalf("a policy answer %+v %v", d, err)
		}
		return l.br.err() != nil
	}, func() any { return l.Stats() })
	before := l.Stats()
	for range 100 {
		if _, err := l.AllowN(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("with the breaker open: %v", err)
		}
	}
	if st := l.Stats(); st.FallbackDecisions != before.FallbackDecisions+100 || st.RedisDecisions != before.RedisDecisions {
		t.Fatalf("the open breaker's answers: %+v, then %+v", before, st)
	}
	s.Start()
	waitUntil(t, "decisions from Redis", func() bool {
		d, err := l.AllowN(ctx, "k", 1)
		return err == nil && d.Allowed
	}, func() any { return l.Stats() })
}
