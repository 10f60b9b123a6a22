package redisstore

import (
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

// A stalled server (SIGSTOP) with short client timeouts: the calls in
// flight when it stalled time out and are answered by the policy, but
// their commands wait in the server's socket buffers and run when it
// resumes (SIGCONT), counting units that no real decision admitted. The
// breaker bounds them: the first timeout opens it, so each caller has at
// most one such call (its n), sent at most 1 + MaxRetries times. Redis
// then holds the units admitted by real decisions, plus phantom units
// within 0 ≤ phantom ≤ (1 + MaxRetries) × Σ n over the callers. They
// only make later decisions stricter, for one window at most.
func TestStallPhantomUnits(t *testing.T) {
	for _, retries := range []int{0, 2} {
		t.Run(fmt.Sprint("MaxRetries=", retries), func(t *testing.T) {
			s := redistest.Start(t)
			mr := retries
			if mr == 0 {
				mr = -1 // go-redis: -1 is no retry, 0 the default (3)
			}
			c := redis.NewClient(&redis.Options{
				Addr: s.Addr(), MaxRetries: mr, DialerRetries: 1, PoolSize: 16,
				DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond,
			})
			defer c.Close()
			l := mustNew(t, c, engine.Config{Limit: 1_000_000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
			const callers = 8
			var admitted, policy, maxN atomic.Int64
			stop := make(chan struct{})
			errc := make(chan error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				n := int64(i + 1)
				maxN.Add(n) // Σ n
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						d, err := l.AllowN(ctx, "k", n)
						switch {
						case err == nil && d.Allowed:
							admitted.Add(n)
						case errors.Is(err, ErrUnavailable):
							policy.Add(1)
						default:
							errc <- fmt.Errorf("%+v %v", d, err)
							return
						}
					}
				})
			}
			waitFor := func(what string, cond func() bool) {
				t.Helper()
				for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
					if time.Since(start) > 10*time.Second {
						t.Fatalf("timed out waiting for %s: %+v", what, l.Stats())
					}
				}
			}
			waitFor("decisions", func() bool { return l.Stats().RedisDecisions > 200 })
			s.Signal(syscall.SIGSTOP)
			waitFor("the breaker to open", func() bool { return l.br.err() != nil })
			// Every call sent before the stall has timed out by now
			// (ReadTimeout 100 ms, each retry as long).
			time.Sleep(time.Duration(retries+1)*100*time.Millisecond + 200*time.Millisecond)
			s.Signal(syscall.SIGCONT)
			before := l.Stats().RedisDecisions
			waitFor("recovery", func() bool { return l.Stats().RedisDecisions > before+200 })
			close(stop)
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			stored := storedUnits(t, c, l, "k")
			phantom := stored - admitted.Load()
			bound := int64(1+retries) * maxN.Load()
			t.Logf("admitted %d units by real decisions, Redis holds %d: %d phantom units (bound %d); %d policy answers; %+v",
				admitted.Load(), stored, phantom, bound, policy.Load(), l.Stats())
			if phantom < 0 || phantom > bound {
				t.Fatalf("phantom units %d outside [0, %d]", phantom, bound)
			}
		})
	}
}
