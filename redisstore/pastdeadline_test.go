package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Callers whose deadlines have already passed, or who cancel at once from
// another goroutine, beside 16 spinners: "a call that was never sent is no
// evidence against Redis" and "a policy answers for the backend, never for
// the caller" (docs/design.md §10, the failure policy). On a healthy Redis: nothing
// admitted past the limit, no breaker, no policy decision.
func TestPastDeadlinesAndCancelsAreNoOutage(t *testing.T) {
	s := redistest.Start(t)
	i := 0
	for _, hybrid := range []bool{false, true} {
		for _, sh := range []floodShape{
			{callers: 128, spinners: 16, past: true, noDeadline: 16},
			{callers: 128, spinners: 16, cancelEarly: true, maxDeadline: time.Millisecond, noDeadline: 16},
		} {
			i++
			t.Run(fmt.Sprintf("hybrid=%v/past=%v/cancel=%v", hybrid, sh.past, sh.cancelEarly), func(t *testing.T) {
				if hybrid {
					longOnly(t)
				}
				c := redis.NewClient(&redis.Options{Addr: s.Addr()})
				defer c.Close()
				opts := []Option{WithFailurePolicy(FailOpen), WithPrefix(fmt.Sprintf("past%d:", i))}
				if hybrid {
					opts = append(opts, WithHybrid(5*time.Millisecond, 2))
				}
				l := fullLimiter(t, c, opts...)
				ft := floodWith(l, "k", sh, time.Second)
				st := l.Stats()
				t.Logf("%s", report(ft, st))
				if ft.admitted.Load() != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
					t.Errorf("Redis answered throughout, yet: %d admitted past the limit, BreakerOpens %d, FallbackDecisions %d", ft.admitted.Load(), st.BreakerOpens, st.FallbackDecisions)
				}
			})
		}
	}
}
