package redisstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A real SIGSTOP stall with mixed callers: two callers with no deadline
// (their own round trips, holding the two sender slots until ReadTimeout,
// 3 s here) and eight callers with 20 ms deadlines. README: the breaker
// opens "at the first caller's deadline that passes once round trips have
// gone unanswered for 100 ms". Promised: open within a few hundred ms of
// the stall; deadline callers then answered at once.
func TestReview6StallMixedCallersOpens(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 3 * time.Second, PoolSize: 64})
	defer c.Close()
	var onErr, calls atomic.Int64
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithOnError(func(error) { onErr.Add(1) }))
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	calls.Add(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stalled atomic.Int64 // unix nanos of the stall
	var quickOpen atomic.Int64
	for i := range 10 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.Background(), func() {}
				if i >= 2 {
					cx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
				}
				t0 := time.Now()
				_, err := l.AllowN(cx, "k", 1)
				cancel()
				calls.Add(1)
				if err != nil && strings.Contains(err.Error(), "breaker is open") && time.Since(t0) < 5*time.Millisecond && stalled.Load() != 0 {
					quickOpen.CompareAndSwap(0, time.Now().UnixNano())
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	stalled.Store(time.Now().UnixNano())
	s.Signal(syscall.SIGSTOP)
	time.Sleep(1200 * time.Millisecond)
	st := l.Stats()
	opened := quickOpen.Load()
	s.Signal(syscall.SIGCONT)
	close(stop)
	wg.Wait()
	t.Logf("stats at 1.2 s into the stall: %+v", st)
	if st.BreakerOpens == 0 || opened == 0 {
		t.Fatalf("breaker not open 1.2 s into a SIGSTOP stall with mixed callers (BreakerOpens %d)", st.BreakerOpens)
	}
	time.Sleep(3500 * time.Millisecond) // let the 3 s reads and the probe settle
	st = l.Stats()
	if got := st.RedisDecisions + st.LocalDecisions + st.FallbackDecisions + st.CallerGone; int64(got) != calls.Load() {
		t.Errorf("decisions counted %d, calls %d: %+v", got, calls.Load(), st)
	}
	if int64(st.Failures) != onErr.Load() {
		t.Errorf("Failures %d != OnError calls %d", st.Failures, onErr.Load())
	}
	t.Logf("first immediate breaker answer %v after the stall", time.Duration(opened-stalled.Load()))
	if d := time.Duration(opened - stalled.Load()); d > 400*time.Millisecond {
		t.Errorf("breaker opened %v after the stall; promised at the first 20 ms deadline after 100 ms unanswered", d)
	}
}

// Close "waits for the round trips in flight when it is called (not for
// those that decisions after it start)". A stalled server, ReadTimeout
// 300 ms: one round trip in flight at Close; decisions after Close keep
// starting round trips (Close turns the breaker off). Promised: Close
// returns about 300 ms after the first round trip started.
func TestReview6CloseIgnoresLaterRoundTrips(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 300 * time.Millisecond, PoolSize: 64})
	defer c.Close()
	l, err := New(c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithBreaker(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGSTOP)
	defer s.Signal(syscall.SIGCONT)
	t0 := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = l.AllowN(context.Background(), "k", 1) })
	time.Sleep(30 * time.Millisecond)
	done := make(chan time.Duration, 1)
	go func() { l.Close(); done <- time.Since(t0) }()
	stop := make(chan struct{})
	for i := range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if i%2 == 0 {
					_, _ = l.AllowN(context.Background(), "k", 1)
				} else {
					cx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
					_, _ = l.AllowN(cx, "k", 1)
					cancel()
				}
			}
		})
	}
	var took time.Duration
	select {
	case took = <-done:
	case <-time.After(3 * time.Second):
		took = -1
	}
	close(stop)
	s.Signal(syscall.SIGCONT)
	wg.Wait()
	t.Logf("Close returned %v after the first round trip started", took)
	if took < 0 || took > 450*time.Millisecond {
		t.Errorf("Close took %v; the round trip in flight at Close ended by ~300 ms", took)
	}
}
