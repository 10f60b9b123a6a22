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

// holdPool takes n connections of c's pool, as an application that shares
// the client does with BLPOP or Conn(), and returns the function that
// gives them back.
func holdPool(t *testing.T, c *redis.Client, n int) (release func()) {
	t.Helper()
	var conns []*redis.Conn
	for range n {
		cn := c.Conn()
		if err := cn.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			for _, cn := range conns {
				_ = cn.Close()
			}
		})
	}
	t.Cleanup(release)
	return release
}

// poolTally counts what callers saw.
type poolTally struct{ calls, admitted, unavailable atomic.Int64 }

// poolCallers runs 16 callers of one unit of key until stop: half with no
// deadline, half with 50 ms deadlines.
func poolCallers(l *Limiter, key string, stop chan struct{}, wg *sync.WaitGroup, pt *poolTally) {
	for i := range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.Background(), context.CancelFunc(func() {})
				if i%2 == 1 {
					cx, cancel = context.WithTimeout(cx, 50*time.Millisecond)
				}
				d, err := l.AllowN(cx, key, 1)
				cancel()
				pt.calls.Add(1)
				if d.Allowed {
					pt.admitted.Add(1)
				}
				if errors.Is(err, ErrUnavailable) {
					pt.unavailable.Add(1)
				}
			}
		})
	}
}

// The application holds every connection of the client it shares with the
// limiter (PoolSize 2, both taken): the limiter's calls wait for a
// connection and fail with go-redis's pool timeout, never sent. That is
// the process's state, not Redis's: nothing is admitted on the full key,
// no policy decides, no breaker opens, in the plain and the hybrid mode.
// And the confirmation does not wait for that pool: with the pool still
// held, a stopped Redis (SIGSTOP) is detected. Before, the confirmation's
// own check waited for the held pool, found "no reply", and FailOpen
// admitted 550–748 calls on a key full at Strict 5 per minute.
func TestPoolHeldByApplicationIsNoOutage(t *testing.T) {
	for _, hybrid := range []bool{false, true} {
		t.Run(fmt.Sprint("hybrid=", hybrid), func(t *testing.T) {
			s := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 2, PoolTimeout: 20 * time.Millisecond,
				ReadTimeout: time.Second})
			defer c.Close()
			opts := []Option{WithFailurePolicy(FailOpen)}
			if hybrid {
				opts = append(opts, WithHybrid(5*time.Millisecond, 2))
			}
			l := mustNew(t, c, engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
			if d, err := l.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
				t.Fatalf("filling the key: %+v %v", d, err)
			}
			release := holdPool(t, c, 2)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var pt poolTally
			poolCallers(l, "k", stop, &wg, &pt)
			time.Sleep(time.Second)
			st := l.Stats()
			t.Logf("pool held: %d calls, %d admitted, %d policy answers; %+v", pt.calls.Load(), pt.admitted.Load(), pt.unavailable.Load(), st)
			if pt.admitted.Load() != 0 || pt.unavailable.Load() != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
				t.Errorf("a pool held by the application was taken for an outage: %d admitted, %d policy answers, %+v", pt.admitted.Load(), pt.unavailable.Load(), st)
			}
			// A real outage while the pool is still held.
			began := time.Now()
			resume := stall(t, s)
			waitUntil(t, "the outage's detection with the pool held", func() bool { return l.Stats().BreakerOpens > 0 }, func() any { return l.Stats() })
			t.Logf("SIGSTOP with the pool held: detected after %v", time.Since(began).Round(time.Millisecond))
			resume()
			close(stop)
			wg.Wait()
			release()
		})
	}
}
