package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Genuine outages with odd client options are still detected within the
// documented time: "a silent one (SIGSTOP, CLIENT PAUSE, DEBUG SLEEP, a
// path that drops packets) about 0.1 s + the budget + 0.03 s after the
// silence begins when callers have deadlines", the budget being the
// ReadTimeout, at least 250 ms, 5 s when unset (docs/design.md §10). The
// test allows twice that plus 300 ms (a loaded machine).
func TestAttackOutageDetectedWithOddReadTimeouts(t *testing.T) {
	type kind struct {
		name  string
		begin func(t *testing.T, s *redistest.Server, admin *redis.Client) (end func())
	}
	kinds := []kind{
		{"SIGSTOP", func(t *testing.T, s *redistest.Server, _ *redis.Client) func() { return stall(t, s) }},
		{"CLIENT-PAUSE", func(t *testing.T, _ *redistest.Server, admin *redis.Client) func() {
			if err := admin.Do(ctx, "CLIENT", "PAUSE", 8000).Err(); err != nil {
				t.Fatal(err)
			}
			return func() { _ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err() }
		}},
	}
	rtos := []time.Duration{time.Millisecond, 100 * time.Millisecond}
	if longRuns() {
		rtos = append(rtos, -1, -2) // a 5 s budget each
	}
	for _, rto := range rtos {
		for _, cte := range []bool{false, true} {
			if rto == -2 && cte {
				continue // its callers hang: TestAttackNoReadDeadlineWithContextTimeout
			}
			for _, k := range kinds {
				t.Run(fmt.Sprintf("ReadTimeout=%v/ContextTimeoutEnabled=%v/%s", rto, cte, k.name), func(t *testing.T) {
					s := redistest.Start(t)
					c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: rto, ContextTimeoutEnabled: cte, MaxRetries: -1})
					defer c.Close()
					admin := client(t, s)
					l := mustNew(t, c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithPolicy(FailClosed))
					budget := max(rto, 250*time.Millisecond)
					if rto <= 0 {
						budget = 5 * time.Second
					}
					documented := 100*time.Millisecond + budget + 30*time.Millisecond
					var end func()
					d := detectAfter(t, l, func() { end = k.begin(t, s, admin) }, nil, 2*documented+300*time.Millisecond)
					end()
					t.Logf("detected after %v (documented about %v); %+v", d, documented, l.Stats())
					if d == 0 {
						t.Errorf("%s not detected within %v (documented about %v)", k.name, 2*documented+300*time.Millisecond, documented)
					}
				})
			}
		}
	}
}
