package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A healthy local server with sporadic traffic: after 150 ms idle, one
// caller with a tiny remaining budget (200 µs) gives up, then a caller with
// no deadline comes 1 ms later. The breaker should not refuse it: Redis is
// answering (nobody asked it in the last 100 ms).
func TestReview5IdleThenTinyDeadline(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.AllowN(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	refused := 0
	var tinyErr error
	for range 10 {
		time.Sleep(150 * time.Millisecond)
		cx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
		_, terr := l.AllowN(cx, "k", 1)
		cancel()
		if tinyErr == nil {
			tinyErr = terr
		}
		time.Sleep(time.Millisecond)
		if _, err := l.AllowN(context.Background(), "k", 1); err != nil && strings.Contains(err.Error(), "breaker is open") {
			refused++
		}
	}
	t.Logf("refused %d of 10; the tiny caller's error: %v; %+v", refused, tinyErr, l.Stats())
	if refused > 0 {
		t.Errorf("%d of 10 no-deadline callers on a healthy server refused by a breaker opened by one caller's 200 µs budget", refused)
	}
}
