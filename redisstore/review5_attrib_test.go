package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Every reply reaches its own caller: each goroutine has its own key and
// checks Remaining against its own count, while SCRIPT FLUSH runs every few
// ms and callers mix no-deadline, cancellable and deadline contexts.
func TestReview5AttributionWithFlushes(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64})
	defer c.Close()
	admin := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer admin.Close()
	const L = 1 << 20
	l := mustNew(t, c, engine.Config{Limit: L, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	p.delay.Store(int64(500 * time.Microsecond))
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
				admin.ScriptFlush(context.Background())
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			key := fmt.Sprint("own", g)
			var count int64
			for j := range 100 {
				n := int64(1 + (g+j)%7)
				var cx context.Context = context.Background()
				cancel := func() {}
				switch (g + j) % 3 {
				case 1:
					cx, cancel = context.WithCancel(cx)
				case 2:
					cx, cancel = context.WithTimeout(cx, 5*time.Second)
				}
				d, err := l.AllowN(cx, key, n)
				cancel()
				if err != nil {
					t.Errorf("%s: %v", key, err)
					return
				}
				count += n
				if !d.Allowed || d.Remaining != L-count || d.Limit != L {
					t.Errorf("%s call %d: %+v, want Remaining %d: another caller's reply", key, j, d, L-count)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	t.Logf("%+v", l.Stats())
}
