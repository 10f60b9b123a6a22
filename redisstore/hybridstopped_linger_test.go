package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A hybrid limiter with the longest linger, under load on a few keys, on
// a server stopped (SIGSTOP) mid-load: its failure state begins (flush
// deadline, then the confirmation), the policy answers meanwhile, and
// after the server resumes a probe ends it and decisions come from Redis
// and locally again; no error of an undocumented kind, no key past its
// limit plus the R = 1 allowance.
func TestHybridLingerStoppedServerDetected(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	const limit = 200
	l := mustNew(t, c, engine.Config{Limit: limit, Window: time.Hour, Algorithm: engine.SlidingWindowStrict},
		WithLinger(time.Millisecond), WithHybrid(10*time.Millisecond, 4), WithReplicas(1))
	stop := make(chan struct{})
	tl, wg := lingerLoad(l, 4, 16, stop)
	waitUntil(t, "flushes before the stop", func() bool { return l.Stats().Flushes > 3 }, func() any { return l.Stats() })
	resume := stall(t, s)
	waitUntil(t, "the failure state on a stopped server", func() bool { return l.Stats().BreakerOpens > 0 && tl.policy.Load() > 0 }, func() any { return l.Stats() })
	resume()
	st0 := l.Stats()
	waitUntil(t, "decisions from Redis after the resume", func() bool {
		st := l.Stats()
		return st.Flushes > st0.Flushes+3 && st.RedisDecisions+st.LocalDecisions > st0.RedisDecisions+st0.LocalDecisions+50
	}, func() any { return l.Stats() })
	close(stop)
	wg.Wait()
	st := l.Stats()
	t.Logf("stats %+v; admitted %d, policy %d, no reply %d, gone %d, other %d", st, tl.admitted.Load(), tl.policy.Load(), tl.noReply.Load(), tl.gone.Load(), tl.other.Load())
	if tl.other.Load() != 0 {
		t.Errorf("%d errors of no documented kind, last: %v", tl.other.Load(), tl.lastOther.Load())
	}
	if tl.admitted.Load() > 4*(limit+4) {
		t.Errorf("%d admitted on 4 keys of limit %d", tl.admitted.Load(), limit)
	}
}
