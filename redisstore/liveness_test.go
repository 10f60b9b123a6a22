package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The silence that is an outage follows the client's ReadTimeout, the
// bound go-redis puts on every reply: at least confirmBudget, and
// go-redis's default when the client sets no read deadline.
func TestLiveBudgetFollowsReadTimeout(t *testing.T) {
	for _, tc := range []struct {
		rt, want time.Duration
	}{
		{0, 5 * time.Second}, // go-redis's default
		{-1, defaultLive},    // no read deadline
		{-2, defaultLive},
		{100 * time.Millisecond, confirmBudget},
		{confirmBudget, confirmBudget},
		{2 * time.Second, 2 * time.Second},
	} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: tc.rt})
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: tc.rt})
		r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ReadTimeout: tc.rt})
		for _, u := range []redis.UniversalClient{c, cc, r} {
			if got := liveBudget(u); got != tc.want {
				t.Errorf("%T ReadTimeout %v: budget %v, want %v", u, tc.rt, got, tc.want)
			}
			_ = u.Close()
		}
	}
}

// A Redis whose round trip is longer than 250 ms but within the client's
// ReadTimeout (2 s) answers, late: behind a path that adds 400 ms to every
// reply, callers with 20 ms deadlines on a full key under FailOpen are
// gone (CallerGone), never admitted, and no breaker opens. With
// ReadTimeout 300 ms the same path is, to go-redis and to the limiter, an
// outage: the breaker opens. Before the budget followed ReadTimeout, the
// first case opened the breaker after 250 ms of silence and FailOpen
// admitted every caller.
func TestDistantRedisWithinReadTimeoutIsAlive(t *testing.T) {
	for _, tc := range []struct {
		rt   time.Duration
		down bool
	}{{2 * time.Second, false}, {300 * time.Millisecond, true}} {
		t.Run(fmt.Sprint("ReadTimeout=", tc.rt), func(t *testing.T) {
			s := redistest.Start(t)
			p := startProxy(t, s.Addr())
			c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, ReadTimeout: tc.rt})
			defer c.Close()
			l := mustNew(t, c, engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithFailurePolicy(FailOpen))
			if d, err := l.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
				t.Fatalf("filling the key: %+v %v", d, err)
			}
			p.delay.Store(int64(400 * time.Millisecond))
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var admitted, unavailable atomic.Int64
			for range 8 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						cx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
						d, err := l.AllowN(cx, "k", 1)
						cancel()
						if d.Allowed {
							admitted.Add(1)
						}
						if errors.Is(err, ErrUnavailable) {
							unavailable.Add(1)
							time.Sleep(time.Millisecond)
						}
					}
				})
			}
			if tc.down {
				waitUntil(t, "the breaker to open on replies slower than ReadTimeout", func() bool { return l.Stats().BreakerOpens > 0 }, func() any { return l.Stats() })
			} else {
				time.Sleep(1500 * time.Millisecond)
			}
			close(stop)
			wg.Wait()
			st := l.Stats()
			t.Logf("400 ms replies, ReadTimeout %v: %d admitted, %d policy answers; %+v", tc.rt, admitted.Load(), unavailable.Load(), st)
			if !tc.down && (admitted.Load() != 0 || unavailable.Load() != 0 || st.BreakerOpens != 0) {
				t.Errorf("a Redis answering within ReadTimeout was taken for an outage: %d admitted, %d policy answers, %+v", admitted.Load(), unavailable.Load(), st)
			}
		})
	}
}
