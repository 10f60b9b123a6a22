package redisstore

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A process starved of CPU, whose client's own timeouts fire on every
// round trip (ReadTimeout 1 ms: the budget is then its floor, 250 ms), on
// a healthy local redis-server: the confirmation's check waits behind
// every runnable goroutine for each reply (GOMAXPROCS 1, spinners each
// holding the CPU for a time slice), often longer than the budget. Its
// connection must judge the silence by the socket, not by a deadline
// that fired while it waited (checkconn.go). The promise (docs/design.md
// §10): no breaker opens, no policy answers, nothing is admitted past the
// full key, a patient caller (no deadline) is never refused. Before the
// fix, FailOpen admitted up to 1,357,289 calls past the limit and
// FailClosed refused 28,241 of 28,272 patient callers, in some runs; this
// shape (spinners) opened the breaker in most rounds.
func TestStarvedProcessTinyReadTimeoutIsNoOutage(t *testing.T) {
	s := redistest.Start(t)
	hybrids, rounds := []bool{false}, 2
	if longRuns() {
		hybrids, rounds = []bool{false, true}, 6
	}
	for i, hybrid := range hybrids {
		for _, pol := range []Policy{FailOpen, FailClosed} {
			t.Run(fmt.Sprintf("hybrid=%v/%v", hybrid, pol), func(t *testing.T) {
				c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: time.Millisecond})
				defer c.Close()
				var h hookLog
				opts := []Option{h.opt(), WithPolicy(pol), WithPrefix(fmt.Sprintf("starvedtiny%d%v:", i, pol))}
				if hybrid {
					opts = append(opts, WithHybrid(5*time.Millisecond, 2))
				}
				var l *Limiter
				if pol == FailOpen {
					l = fullLimiter(t, c, opts...)
				} else {
					l = mustNew(t, c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
				}
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
				sh := floodShape{callers: 128, spinners: 16, maxDeadline: 3 * time.Millisecond, noDeadline: 4}
				var ft *floodTally
				for r := 0; r < rounds && l.Stats().BreakerOpens == 0; r++ {
					ft = floodWith(l, "k", sh, 2*time.Second)
				}
				runtime.GOMAXPROCS(2)
				st := l.Stats()
				t.Logf("%s", report(ft, st))
				for j, err := range h.all() {
					if j < 3 {
						t.Logf("OnError: %v", err)
					}
				}
				if st.BreakerOpens != 0 || st.FallbackDecisions != 0 || ft.unavailable.Load() != 0 || pol == FailOpen && ft.admitted.Load() != 0 {
					t.Errorf("Redis answered throughout, yet BreakerOpens %d, FallbackDecisions %d, policy answers %d, admitted %d (past the limit if FailOpen)",
						st.BreakerOpens, st.FallbackDecisions, ft.unavailable.Load(), ft.admitted.Load())
				}
			})
		}
	}
}
