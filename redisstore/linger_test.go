package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// WithLinger refuses a duration outside 0 … 1ms, naming the option and
// the range, and takes both ends. No server is needed: New refuses first.
func TestWithLingerRange(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	cfg := engine.Config{Limit: 10, Window: time.Second}
	for _, d := range []time.Duration{-time.Nanosecond, time.Millisecond + time.Nanosecond, time.Hour} {
		_, err := New(c, cfg, WithLinger(d))
		if err == nil || !strings.Contains(err.Error(), "WithLinger") || !strings.Contains(err.Error(), "1ms") {
			t.Errorf("WithLinger(%v): %v, want an error naming WithLinger and its range", d, err)
		}
	}
	for _, d := range []time.Duration{0, time.Millisecond} {
		l := mustNew(t, c, cfg, WithLinger(d), WithBreaker(0, 0))
		if l.batch.linger != d {
			t.Errorf("WithLinger(%v): the batcher lingers %v", d, l.batch.linger)
		}
	}
	if l := mustNew(t, c, cfg, WithBreaker(0, 0)); l.batch.linger != DefaultLinger {
		t.Errorf("the default linger is %v, want DefaultLinger", l.batch.linger)
	}
}

// A lone caller never waits for company: every one of its calls is a
// round trip of its own, and no sender gathers, whether it makes its own
// round trips (no deadline) or queues them (a deadline, a sender's).
func TestLoneCallerNeverGathers(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Limit: 1000, Window: time.Minute}, WithLinger(time.Millisecond))
	far, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 40 {
		c := context.Background()
		if i%2 == 1 {
			c = far
		}
		if _, err := l.AllowN(c, "lone", 1); err != nil {
			t.Fatal(err)
		}
		l.batch.wait()
	}
	if r, p, g := l.batch.rounds.Load(), l.batch.piped.Load(), l.batch.gathers.Load(); r != 40 || p != 0 || g != 0 {
		t.Fatalf("%d round trips, %d pipelines, %d gathers: want 40, 0, 0", r, p, g)
	}
}

// While a sender gathers, callers that would make their own round trip
// (no deadline, a free slot) queue for it instead, and go as one pipeline.
func TestGatheringSenderTakesInlineCallers(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Limit: 1000, Window: time.Minute})
	if _, err := l.AllowN(ctx, "warm", 0); err != nil { // loads the script
		t.Fatal(err)
	}
	b := l.batch
	b.wait()
	rounds := b.rounds.Load()
	b.mu.Lock()
	b.gathering, b.senders = true, 1 // a sender gathering in its slot
	b.mu.Unlock()
	const callers = 3
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			if d, err := l.AllowN(context.Background(), fmt.Sprint("k", i), 1); err != nil || !d.Allowed {
				t.Errorf("caller %d: %+v %v", i, d, err)
			}
		})
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) { // waiting for the callers to queue
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n == callers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callers queued behind the gathering sender", n, callers)
		}
	}
	if r := b.rounds.Load(); r != rounds {
		t.Fatalf("%d round trips while the sender gathered: a caller went alone", r-rounds)
	}
	b.mu.Lock()
	b.gathering = false
	b.mu.Unlock()
	go b.run() // the gathering sender sends
	wg.Wait()
	b.wait()
	if r, p := b.rounds.Load()-rounds, b.piped.Load(); r != 1 || p != 1 {
		t.Fatalf("%d round trips, %d pipelines: want the three calls as one pipeline", r, p)
	}
}
