package redisstore

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Close waits for the round trips in flight: on a stalled server each is
// bounded by (1 + MaxRetries) × ReadTimeout plus go-redis's retry backoff
// (the doc said ReadTimeout alone until the fourth adversarial review found
// Close at twice that with the default MaxRetries).
func TestReview4CloseBoundedByReadTimeout(t *testing.T) {
	for _, mr := range []int{0, -1} {
		t.Run("", func(t *testing.T) {
			s := redistest.Start(t)
			const rt = 200 * time.Millisecond
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: rt, MaxRetries: mr})
			defer c.Close()
			l, err := New(c, engine.Config{Limit: 1 << 20, Window: time.Second, Algorithm: engine.SlidingWindowStrict})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = l.AllowN(context.Background(), "warm", 1)
			s.Signal(syscall.SIGSTOP)
			var wg sync.WaitGroup
			var bgEl time.Duration
			wg.Go(func() { t0 := time.Now(); _, _ = l.AllowN(context.Background(), "bg", 1); bgEl = time.Since(t0) })
			wg.Go(func() {
				cx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				defer cancel()
				_, _ = l.AllowN(cx, "dl", 1)
			})
			time.Sleep(30 * time.Millisecond)
			t0 := time.Now()
			_ = l.Close()
			el := time.Since(t0)
			s.Signal(syscall.SIGCONT)
			wg.Wait()
			t.Logf("MaxRetries %d: Close took %v with ReadTimeout %v; a never-ending caller's decision took %v", mr, el, rt, bgEl)
			retries := 3 // go-redis's default, MaxRetries 0
			if mr < 0 {
				retries = 0
			}
			// Backoff: at most 512 ms per retry (go-redis's MaxRetryBackoff).
			bound := time.Duration(1+retries)*rt + time.Duration(retries)*512*time.Millisecond + 100*time.Millisecond
			if el > bound {
				t.Errorf("Close took %v, documented bound (1 + MaxRetries) × ReadTimeout + backoff is %v", el, bound)
			}
		})
	}
}
