package redisstore

import (
	"context"
	"errors"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A server that answers every round trip in about 60 ms (a slow link),
// idle for a second, then bursts of callers with 2–50 ms deadlines mixed
// with no-deadline callers. No round trip goes unanswered for 100 ms, so
// the README's rule says the breaker never opens. Also: every decision in
// exactly one Stats counter; Failures == OnError calls.
func TestReview6SlowLinkBurstsNoOpen(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 128, ReadTimeout: 2 * time.Second})
	defer c.Close()
	var onErr atomic.Int64
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithOnError(func(error) { onErr.Add(1) }))
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(60 * time.Millisecond))
	var calls, openAns atomic.Int64
	for round := 0; round < 4; round++ {
		time.Sleep(time.Second)
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				rng := rand.New(rand.NewSource(int64(round*100 + i)))
				for j := 0; j < 3; j++ {
					cx, cancel := context.Background(), func() {}
					if i%8 != 0 {
						cx, cancel = context.WithTimeout(context.Background(), time.Duration(2+rng.Intn(48))*time.Millisecond)
					}
					_, err := l.AllowN(cx, "k", 1)
					cancel()
					calls.Add(1)
					if err != nil && !errors.Is(err, context.DeadlineExceeded) {
						openAns.Add(1)
						t.Logf("round %d: %v", round, err)
					}
				}
			})
		}
		wg.Wait()
	}
	time.Sleep(200 * time.Millisecond)
	st := l.Stats()
	t.Logf("%+v calls=%d onErr=%d", st, calls.Load(), onErr.Load())
	if st.BreakerOpens != 0 || openAns.Load() != 0 {
		t.Errorf("breaker opened %d times (%d answers by it) although every round trip was answered within ~60 ms", st.BreakerOpens, openAns.Load())
	}
	if got := st.RedisDecisions + st.LocalDecisions + st.FallbackDecisions + st.CallerGone; int64(got) != calls.Load()+1 {
		t.Errorf("decisions counted %d, calls %d", got, calls.Load()+1)
	}
	if int64(st.Failures) != onErr.Load() {
		t.Errorf("Failures %d != OnError calls %d", st.Failures, onErr.Load())
	}
}
