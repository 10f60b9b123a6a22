package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// busyScript spins in Redis for about ms milliseconds (another client's
// slow script, below busy-reply-threshold: Redis answers nobody meanwhile,
// and answers everyone after).
const busyScript = `local t = redis.call('TIME'); local end_us = t[1]*1000000 + t[2] + tonumber(ARGV[1])*1000
while true do local n = redis.call('TIME'); if n[1]*1000000 + n[2] >= end_us then break end end return 1`

// Another client's slow scripts (200 ms each, 50 ms apart, below the 250 ms
// budget and the 5 s busy-reply-threshold) make Redis late, not down: "a
// pause of Redis shorter than the budget ends before the budget is spent,
// on any machine" (docs/design.md §10). So under the flood: nothing
// admitted past the limit, no breaker, no policy decision. And Close,
// racing the flood's calls in flight, admits nothing past the limit either.
func TestSlowScriptsAreNoOutage(t *testing.T) {
	for _, hybrid := range []bool{false, true} {
		for _, closeMid := range []bool{false, true} {
			t.Run(fmt.Sprintf("hybrid=%v/close-mid-flood=%v", hybrid, closeMid), func(t *testing.T) {
				if hybrid || closeMid {
					longOnly(t)
				}
				s := redistest.Start(t)
				c := redis.NewClient(&redis.Options{Addr: s.Addr()}) // go-redis's defaults
				defer c.Close()
				opts := []Option{WithFailurePolicy(FailOpen)}
				if hybrid {
					opts = append(opts, WithHybrid(5*time.Millisecond, 2))
				}
				l := fullLimiter(t, c, opts...)
				other := client(t, s)
				stop := make(chan struct{})
				done := make(chan struct{})
				var scripts atomic.Int64
				go func() {
					defer close(done)
					for {
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Millisecond):
						}
						if other.Eval(context.Background(), busyScript, nil, 200).Err() == nil {
							scripts.Add(1)
						}
					}
				}()
				if closeMid {
					time.AfterFunc(700*time.Millisecond, func() { _ = l.Close() })
				}
				ft := flood(l, "k", false, 2*time.Second)
				close(stop)
				<-done
				st := l.Stats()
				t.Logf("%d slow scripts; %s", scripts.Load(), report(ft, st))
				if scripts.Load() == 0 {
					t.Fatal("no slow script ran")
				}
				if ft.admitted.Load() != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
					t.Errorf("Redis answered every 200 ms at most, yet: %d admitted past the limit, BreakerOpens %d, FallbackDecisions %d", ft.admitted.Load(), st.BreakerOpens, st.FallbackDecisions)
				}
			})
		}
	}
}
