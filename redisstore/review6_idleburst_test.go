package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A healthy local server; after idle periods (0.3–1.5 s), bursts of 200
// callers with 50 µs–1 ms deadlines. Redis answers every round trip in well
// under 100 ms: the breaker must never open.
func TestReview6IdleTinyDeadlineBursts(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 256})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	for round, idle := range []time.Duration{300, 1500, 700, 1200} {
		time.Sleep(idle * time.Millisecond)
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				cx, cancel := context.WithTimeout(context.Background(), time.Duration(50+(i*37)%950)*time.Microsecond)
				_, _ = l.AllowN(cx, "k", 1)
				cancel()
			})
		}
		wg.Wait()
		if st := l.Stats(); st.BreakerOpens != 0 {
			t.Fatalf("round %d: breaker opened on a healthy server: %+v", round, st)
		}
	}
	t.Logf("%+v", l.Stats())
}
