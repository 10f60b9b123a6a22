package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// ReadTimeout −2 tells go-redis never to set a read deadline, not even
// from the context (ContextTimeoutEnabled has nothing to set it with). The
// promises: "AllowN returns by ctx's deadline (plus the scheduling delay),
// whatever the client's options", and New passes ErrUnboundedRoundTrip to
// OnError "if the client lets a round trip to a stalled server last
// forever (... ReadTimeout −1 or −2, no read deadline, and no
// ContextTimeoutEnabled)". With ReadTimeout −2 and ContextTimeoutEnabled,
// the limiter takes the client to enforce the deadline; on a stopped
// server (SIGSTOP) a call with a 50 ms deadline then did not return for
// over a minute (TestAttackOutageDetectedWithOddReadTimeouts under
// RINGLIMIT_ATTACK=1 hung in detectAfter's wait, its callers in go-redis's
// read), and New gave no warning.
func TestAttackNoReadDeadlineWithContextTimeout(t *testing.T) {
	for _, rto := range []time.Duration{-2, -1} {
		t.Run(fmt.Sprint("ReadTimeout=", rto), func(t *testing.T) {
			s := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: rto, ContextTimeoutEnabled: true, MaxRetries: -1})
			defer c.Close()
			var h hookLog
			l := mustNew(t, c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithPolicy(FailOpen), h.opt())
			if _, err := l.AllowN(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
			resume := stall(t, s)
			defer resume()
			const deadline = 50 * time.Millisecond
			const bound = 3 * time.Second // a hang bound, sixty times the deadline
			done := make(chan time.Duration, 1)
			go func() {
				cx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				t0 := time.Now()
				_, _ = l.AllowN(cx, "k", 1)
				done <- time.Since(t0)
			}()
			select {
			case d := <-done:
				t.Logf("returned after %v", d)
			case <-time.After(bound):
				t.Errorf("AllowN with a %v deadline had not returned after %v on a stopped server (ReadTimeout %v, ContextTimeoutEnabled); ErrUnboundedRoundTrip warnings: %d",
					deadline, bound, rto, h.count(ErrUnboundedRoundTrip))
				resume()
				t.Logf("returned %v after the server resumed", <-done)
			}
		})
	}
}
