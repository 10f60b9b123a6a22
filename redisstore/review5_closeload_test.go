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

// Close "waits for the round trips in flight to come back": bounded by
// one round trip (here ~5 ms of link latency, ReadTimeout 300 ms), even
// while callers keep deciding (decisions after Close still work).
func TestReview5CloseUnderSustainedLoad(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64, ReadTimeout: 300 * time.Millisecond})
	defer c.Close()
	l, err := New(c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(5 * time.Millisecond))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 48 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.Background(), func() {}
				if i%2 == 1 {
					cx, cancel = context.WithTimeout(cx, time.Second)
				}
				_, _ = l.AllowN(cx, "k", 1)
				cancel()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	done := make(chan time.Duration, 1)
	t0 := time.Now()
	go func() { _ = l.Close(); done <- time.Since(t0) }()
	returned := false
	select {
	case d := <-done:
		returned = true
		t.Logf("Close took %v under load", d)
		if d > 500*time.Millisecond {
			t.Errorf("Close took %v while callers kept deciding", d)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("Close did not return within 3 s while callers kept deciding (each round trip ~5 ms)")
	}
	close(stop)
	wg.Wait()
	if !returned {
		select {
		case d := <-done:
			t.Logf("Close returned %v after it was called, once the callers stopped", d)
		case <-time.After(2 * time.Second):
			t.Errorf("Close never returned")
		}
	}
}
