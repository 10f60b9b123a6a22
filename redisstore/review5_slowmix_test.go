package redisstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A slow but alive server (15 ms replies): many callers with 5 ms budgets,
// and a sporadic caller with a 200 ms budget every 250 ms, which Redis can
// answer in time. README: "If Redis answered others lately, the server is
// slower than that caller's deadline ..., not down, and the breaker stays
// closed". Observed: the sporadic caller is refused by an open breaker.
func TestReview5SlowServerSporadicPatientCaller(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.AllowN(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(15 * time.Millisecond))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				_, err := l.AllowN(cx, "k", 1)
				cancel()
				if err != nil && strings.Contains(err.Error(), "breaker is open") {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	var patientOK, patientBreaker, patientOther atomic.Int64
	for range 12 {
		time.Sleep(250 * time.Millisecond)
		cx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := l.AllowN(cx, "k", 1)
		cancel()
		switch {
		case err == nil:
			patientOK.Add(1)
		case strings.Contains(err.Error(), "breaker is open"):
			patientBreaker.Add(1)
		default:
			patientOther.Add(1)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("patient callers: %d Redis answers, %d breaker answers, %d other; %+v", patientOK.Load(), patientBreaker.Load(), patientOther.Load(), l.Stats())
	if patientBreaker.Load() > 0 {
		t.Errorf("%d of 12 callers with a 200 ms budget were refused by the breaker while Redis answered every round trip in 15 ms", patientBreaker.Load())
	}
}
