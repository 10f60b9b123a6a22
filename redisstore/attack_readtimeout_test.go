package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A client's tiny or odd read timeout on a busy process, against a healthy
// local redis-server. The promise (docs/design.md §10): the budget is the
// ReadTimeout but at least 250 ms, 5 s when unset; "a Redis whose check is
// answered within the budget ... is late, not down"; a busy process opens
// no breaker, makes no policy decision, admits nothing past the limit.
func TestAttackOddReadTimeoutIsNoOutage(t *testing.T) {
	s := redistest.Start(t)
	i := 0
	for _, hybrid := range []bool{false, true} {
		for _, rto := range []time.Duration{time.Millisecond, -1, -2} {
			for _, cte := range []bool{false, true} {
				i++
				t.Run(fmt.Sprintf("hybrid=%v/ReadTimeout=%v/ContextTimeoutEnabled=%v", hybrid, rto, cte), func(t *testing.T) {
					cl := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: rto, ContextTimeoutEnabled: cte})
					defer cl.Close()
					opts := []Option{WithPolicy(FailOpen), WithPrefix(fmt.Sprintf("rto%d:", i))}
					if hybrid {
						opts = append(opts, WithHybrid(5*time.Millisecond, 2))
					}
					var h hookLog
					l := fullLimiter(t, cl, append(opts, h.opt())...)
					ft := flood(l, "k", false, time.Second)
					st := l.Stats()
					t.Logf("%s", report(ft, st))
					for j, err := range h.all() {
						if j < 2 {
							t.Logf("OnError: %v", err)
						}
					}
					if ft.admitted.Load() != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
						t.Errorf("Redis answered throughout, yet: %d admitted past the limit, BreakerOpens %d, FallbackDecisions %d", ft.admitted.Load(), st.BreakerOpens, st.FallbackDecisions)
					}
				})
			}
		}
	}
}
