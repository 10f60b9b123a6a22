package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// README: a caller whose deadline passes gets the policy's answer; "if its
// call had not been sent yet, it is never sent ...; if it had, Redis may
// count it (the error says which)". Healthy server, short deadlines: every
// such error must say which.
func TestReview4ErrorSaysWhich(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 64})
	defer c.Close()
	l, err := New(c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithBreaker(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var bad atomic.Int64
	var mu sync.Mutex
	var sample string
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 5))
			for range 200 {
				cx, cancel := context.WithTimeout(context.Background(), time.Duration(50+r.IntN(1000))*time.Microsecond)
				_, err := l.AllowN(cx, "c", 1)
				cancel()
				if err == nil || !errors.Is(err, ErrUnavailable) {
					continue
				}
				m := err.Error()
				if !strings.Contains(m, "Redis counted nothing") && !strings.Contains(m, "may have counted") {
					bad.Add(1)
					mu.Lock()
					sample = m
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Errorf("%d deadline errors do not say whether the call was sent, e.g. %q", bad.Load(), sample)
	}
}
