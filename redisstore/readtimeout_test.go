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

// A client's tiny or odd read timeout on a busy process, against a healthy
// local redis-server. The promise (docs/design.md §10): the budget is the
// ReadTimeout but at least 250 ms, 5 s when unset; "a Redis whose check is
// answered within the budget ... is late, not down"; a busy process opens
// no breaker, makes no policy decision, admits nothing past the limit.
func TestOddReadTimeoutIsNoOutage(t *testing.T) {
	s := redistest.Start(t)
	i := 0
	for _, hybrid := range []bool{false, true} {
		for _, rto := range []time.Duration{time.Millisecond, -1, -2} {
			for _, cte := range []bool{false, true} {
				i++
				t.Run(fmt.Sprintf("hybrid=%v/ReadTimeout=%v/ContextTimeoutEnabled=%v", hybrid, rto, cte), func(t *testing.T) {
					if hybrid || !cte || rto == -1 {
						longOnly(t)
					}
					cl := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: rto, ContextTimeoutEnabled: cte})
					defer cl.Close()
					opts := []Option{WithFailurePolicy(FailOpen), WithPrefix(fmt.Sprintf("rto%d:", i))}
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

// ReadTimeout −2 tells go-redis never to set a read deadline, not even
// from the context (ContextTimeoutEnabled has nothing to set it with). The
// promises: "AllowN returns by ctx's deadline (plus the scheduling delay),
// whatever the client's options", and New passes ErrUnboundedRoundTrip to
// OnError "if the client lets a round trip to a stalled server last
// forever (... ReadTimeout −1 or −2, no read deadline, and no
// ContextTimeoutEnabled)". With ReadTimeout −2 and ContextTimeoutEnabled,
// the limiter took the client to enforce the deadline; on a stopped
// server (SIGSTOP) a call with a 50 ms deadline then did not return for
// over a minute, and New gave no warning. It must return by its deadline,
// and New must warn for −2 (not for −1, whose reads the context bounds).
func TestNoReadDeadlineKeepsCallersDeadlines(t *testing.T) {
	for _, rto := range []time.Duration{-2, -1} {
		t.Run(fmt.Sprint("ReadTimeout=", rto), func(t *testing.T) {
			s := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: rto, ContextTimeoutEnabled: true, MaxRetries: -1})
			defer c.Close()
			var h hookLog
			l := mustNew(t, c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithFailurePolicy(FailOpen), h.opt())
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
				if w, want := h.count(ErrUnboundedRoundTrip), btoi(rto == -2); w != want {
					t.Errorf("New passed ErrUnboundedRoundTrip %d times, want %d (ReadTimeout %v, ContextTimeoutEnabled)", w, want, rto)
				}
			case <-time.After(bound):
				t.Errorf("AllowN with a %v deadline had not returned after %v on a stopped server (ReadTimeout %v, ContextTimeoutEnabled); ErrUnboundedRoundTrip warnings: %d",
					deadline, bound, rto, h.count(ErrUnboundedRoundTrip))
				resume()
				t.Logf("returned %v after the server resumed", <-done)
			}
		})
	}
}

// Genuine outages with odd client options are still detected within the
// documented time: "a silent one (SIGSTOP, CLIENT PAUSE, DEBUG SLEEP, a
// path that drops packets) about 0.1 s + the budget + 0.03 s after the
// silence begins when callers have deadlines", the budget being the
// ReadTimeout, at least 250 ms, 5 s when unset (docs/design.md §10). The
// test allows twice that plus 300 ms (a loaded machine).
func TestOutageDetectedWithOddReadTimeouts(t *testing.T) {
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
			for _, k := range kinds {
				t.Run(fmt.Sprintf("ReadTimeout=%v/ContextTimeoutEnabled=%v/%s", rto, cte, k.name), func(t *testing.T) {
					if rto != time.Millisecond || cte || k.name != "SIGSTOP" {
						longOnly(t)
					}
					s := redistest.Start(t)
					c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: rto, ContextTimeoutEnabled: cte, MaxRetries: -1})
					defer c.Close()
					admin := client(t, s)
					l := mustNew(t, c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithFailurePolicy(FailClosed))
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
