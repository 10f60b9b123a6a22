package redisstore

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Stats: "Each decision is counted in exactly one of RedisDecisions,
// LocalDecisions, FallbackDecisions, CallerGone and NoReply, except a
// request refused without a round trip". A hybrid limiter's mix of first
// decisions, local ones, costs above maxLocal, n = 0, callers gone, and
// decisions after Close: the five counters must sum to the calls made.
func TestHybridStatsCountEachDecisionOnce(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Limit: 100, Window: time.Minute}, WithHybrid(time.Minute, 3), WithReplicas(1))
	calls := uint64(0)
	for i := 0; i < 10; i++ {
		for _, n := range []int64{0, 1, 3, 5} {
			calls++
			_, _ = l.AllowN(ctx, "a", n)
			calls++
			_, _ = l.AllowN(canceled(), "a", n)
		}
		calls++
		_, _ = l.AllowN(ctx, "cold"+string(rune('0'+i)), 0)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{0, 1, 5} {
		calls++
		_, _ = l.AllowN(ctx, "a", n)
	}
	st := l.Stats()
	if sum := st.RedisDecisions + st.LocalDecisions + st.FallbackDecisions + st.CallerGone + st.NoReply; sum != calls {
		t.Errorf("%d calls, counted %d: %+v", calls, sum, st)
	}
}
