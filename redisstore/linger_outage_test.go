package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// lingerLoad runs callers (deadlines of 20 ms, and none) on a few keys of
// l until stop closes, tallying outcomes.
type lingerTally struct {
	admitted, policy, noReply, gone, other atomic.Int64
	lastOther                              atomic.Value
}

func lingerLoad(l *Limiter, keys int, callers int, stop <-chan struct{}) (*lingerTally, *sync.WaitGroup) {
	var tl lingerTally
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.Background(), context.CancelFunc(func() {})
				if g%2 == 0 {
					cx, cancel = context.WithTimeout(cx, 20*time.Millisecond)
				}
				d, err := l.AllowN(cx, fmt.Sprint("k", (g+i)%keys), 1)
				cancel()
				switch {
				case err == nil:
					if d.Allowed {
						tl.admitted.Add(1)
					}
				case errors.Is(err, ErrUnavailable):
					tl.policy.Add(1)
				case errors.Is(err, ErrNoReply):
					tl.noReply.Add(1)
				case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
					tl.gone.Add(1)
				default:
					tl.other.Add(1)
					tl.lastOther.Store(err.Error())
				}
			}
		})
	}
	return &tl, &wg
}

// A server stopped (SIGSTOP) under load with the longest linger is
// detected as documented (the breaker opens; the policy answers with
// ErrUnavailable), and once it resumes the breaker closes and decisions
// come from Redis again. Nothing is admitted past the limit meanwhile.
func TestLingerStoppedServerDetected(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	const limit = 200
	l := mustNew(t, c, engine.Config{Limit: limit, Window: time.Hour}, WithLinger(time.Millisecond))
	stop := make(chan struct{})
	tl, wg := lingerLoad(l, 4, 16, stop)
	defer func() { close(stop); wg.Wait() }()
	waitUntil(t, "decisions before the stop", func() bool { return l.Stats().RedisDecisions > 200 }, func() any { return l.Stats() })
	resume := stall(t, s)
	waitUntil(t, "the breaker to open on a stopped server", func() bool { return l.Stats().BreakerOpens > 0 && tl.policy.Load() > 0 }, func() any { return l.Stats() })
	resume()
	before := l.Stats().RedisDecisions
	waitUntil(t, "decisions from Redis after the resume", func() bool { return l.Stats().RedisDecisions > before+100 }, func() any { return l.Stats() })
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close
	st := l.Stats()
	t.Logf("stats %+v; admitted %d, policy %d, no reply %d, gone %d, other %d", st, tl.admitted.Load(), tl.policy.Load(), tl.noReply.Load(), tl.gone.Load(), tl.other.Load())
	if tl.admitted.Load() > 4*limit {
		t.Errorf("%d admitted on 4 keys of limit %d", tl.admitted.Load(), limit)
	}
	if tl.other.Load() != 0 {
		t.Errorf("%d errors of no documented kind, last: %v", tl.other.Load(), tl.lastOther.Load())
	}
}

// CLIENT KILL of the limiter's connections, again and again under load
// with the longest linger, is no outage: the breaker never opens, the
// failure policy never answers, a caller whose round trip was cut gets
// ErrNoReply (or its context's error), and no key admits past its limit.
func TestLingerKilledConnectionsAreNoOutage(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const limit = 300
	l := mustNew(t, c, engine.Config{Limit: limit, Window: time.Hour}, WithLinger(time.Millisecond), WithFailurePolicy(FailOpen))
	admin := client(t, s)
	if _, err := admin.Ping(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	tl, wg := lingerLoad(l, 4, 16, stop)
	var kills int
	for kills = 0; kills < 40; kills++ {
		from := l.Stats().RedisDecisions
		waitUntil(t, "decisions between kills", func() bool { return l.Stats().RedisDecisions > from+20 }, func() any { return l.Stats() })
		// Kills every normal client but this one (SKIPME yes): the
		// limiter's connections and its checker's.
		if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err(); err != nil && !strings.Contains(err.Error(), "No such client") {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	l.batch.wait()
	st := l.Stats()
	t.Logf("%d kills; stats %+v; admitted %d, policy %d, no reply %d, gone %d, other %d", kills, st, tl.admitted.Load(), tl.policy.Load(), tl.noReply.Load(), tl.gone.Load(), tl.other.Load())
	if st.BreakerOpens != 0 || tl.policy.Load() != 0 || st.FallbackDecisions != 0 {
		t.Errorf("killed connections taken for an outage: BreakerOpens %d, %d policy answers", st.BreakerOpens, tl.policy.Load())
	}
	if tl.other.Load() != 0 {
		t.Errorf("%d errors of no documented kind, last: %v", tl.other.Load(), tl.lastOther.Load())
	}
	var keys []string
	for i := range 4 {
		keys = append(keys, fmt.Sprint("k", i))
	}
	if tl.admitted.Load() > 4*limit {
		t.Errorf("%d admitted on 4 keys of limit %d", tl.admitted.Load(), limit)
	}
	if stored := storedUnits(t, c, l, keys...); stored < tl.admitted.Load() {
		t.Errorf("%d admitted, Redis holds %d: admissions lost", tl.admitted.Load(), stored)
	}
}
