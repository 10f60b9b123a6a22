package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// README "A stalled server: phantom units": at most k = 2 × (1 + ⌈100 ms
// / d⌉) round trips reach the stalled server, each with at most one call
// per caller: phantom ≤ k × (1 + MaxRetries) × Σ n (MaxRetries −1 here).
// The second review found 78 against the 2 × Σ n = 72 the README claimed
// before the breaker's deadline rule changed.
func TestReview5PhantomBoundDeadlineCallers(t *testing.T) {
	for _, cte := range []bool{false, true} {
		t.Run(fmt.Sprint("ContextTimeoutEnabled=", cte), func(t *testing.T) {
			s := redistest.Start(t)
			c := redis.NewClient(&redis.Options{
				Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, PoolSize: 32, ContextTimeoutEnabled: cte,
				DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond,
			})
			defer c.Close()
			l := mustNew(t, c, engine.Config{Limit: 1_000_000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
			const callers = 8
			var admitted, sumN atomic.Int64
			var stalled atomic.Bool
			var sentDuringStall atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i := range callers {
				n := int64(i + 1)
				sumN.Add(n)
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						cx, cancel := context.WithTimeout(context.Background(), 4*time.Millisecond)
						d, err := l.AllowN(cx, "k", n)
						cancel()
						if err == nil && d.Allowed {
							admitted.Add(n)
						} else if stalled.Load() && errors.Is(err, errNotAnswered) {
							sentDuringStall.Add(1)
						}
					}
				})
			}
			for l.Stats().RedisDecisions < 300 {
				time.Sleep(time.Millisecond)
			}
			s.Signal(syscall.SIGSTOP)
			stalled.Store(true)
			time.Sleep(600 * time.Millisecond)
			s.Signal(syscall.SIGCONT)
			stalled.Store(false)
			time.Sleep(100 * time.Millisecond)
			close(stop)
			wg.Wait()
			l.batch.wait()
			time.Sleep(100 * time.Millisecond)
			got := storedUnits(t, c, l, "k")
			phantom := got - admitted.Load()
			d := 100 * time.Millisecond // ReadTimeout
			if cte {
				d = 4 * time.Millisecond // the callers' deadline
			}
			k := 2 * (1 + (deadlineGrace+d-1)/d)
			bound := int64(k) * sumN.Load()
			t.Logf("admitted %d, Redis %d, phantom %d (bound %d); 'may have counted' answers during stall %d; %+v", admitted.Load(), got, phantom, bound, sentDuringStall.Load(), l.Stats())
			if phantom < 0 || phantom > bound {
				t.Errorf("phantom units %d outside [0, %d]", phantom, bound)
			}
		})
	}
}
