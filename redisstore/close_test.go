package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Close racing callers of every context kind, a stall and a resume: no
// panic, Close returns, no goroutine left once the callers are done.
func TestCloseRacesCallersAndStalls(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 64,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 150 * time.Millisecond, WriteTimeout: 150 * time.Millisecond})
	defer c.Close()
	base := runtime.NumGoroutine()
	for round := range 6 {
		var hook hookCounter
		l, err := New(c, engine.Config{Limit: 50, Window: time.Minute, Algorithm: engine.SlidingWindowStrict},
			WithFallbackLocal(0.5), hook.opt(), WithBreaker(time.Millisecond, 5*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), uint64(round)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					cx, cancel := mixedContext(r, 3*time.Millisecond, 100*time.Microsecond, 3*time.Millisecond)
					_, _ = l.AllowN(cx, fmt.Sprint("k", r.IntN(4)), int64(1+r.IntN(3)))
					cancel()
				}
			})
		}
		time.Sleep(30 * time.Millisecond)
		if round%2 == 1 {
			s.Signal(syscall.SIGSTOP)
		}
		time.Sleep(time.Duration(round*10) * time.Millisecond)
		var cw sync.WaitGroup
		closeStart := time.Now()
		for range 3 {
			cw.Go(func() { _ = l.Close() })
		}
		time.Sleep(20 * time.Millisecond)
		if round%2 == 1 {
			s.Signal(syscall.SIGCONT)
		}
		cw.Wait()
		closeTook := time.Since(closeStart)
		time.Sleep(30 * time.Millisecond) // decisions after Close
		close(stop)
		wg.Wait()
		st := l.Stats()
		if st.Failures != uint64(hook.n.Load()) {
			t.Errorf("round %d: Failures %d != OnError calls %d", round, st.Failures, hook.n.Load())
		}
		if closeTook > 10*time.Second { // a hang bound: each round trip ends by the 150 ms ReadTimeout
			t.Errorf("round %d: Close took %v", round, closeTook)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base+2 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines left (base %d)\n%s", n, base, buf)
	}
}

// Close waits for the round trips in flight, also those whose callers gave
// up at their deadlines, and no sender is left after it.
func TestCloseWaitsForSenders(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	rt := watchRoundTrips(c)
	l, err := New(c, engine.Config{Limit: 100, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	const delay = 150 * time.Millisecond
	p.delay.Store(int64(delay))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			defer cancel()
			if _, err := l.AllowN(dctx, "k", 1); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("want a deadline error, got %v", err)
			}
		})
	}
	wg.Wait() // every caller has returned; their round trips are still out
	sent := rt.started.Load()
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if back := rt.done.Load(); back < sent {
		t.Fatalf("Close returned after %v with %d of %d round trips still out (each %v)", took, sent-back, sent, delay)
	}
	for start := time.Now(); strings.Contains(stacks(), "redisstore.(*batcher)"); time.Sleep(time.Millisecond) {
		if time.Since(start) > hangBound {
			t.Fatalf("senders left after Close:\n%s", stacks())
		}
	}
	// Decisions still work after Close.
	p.delay.Store(0)
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
}

// Close waits for the round trips in flight: on a stalled server each is
// bounded by (1 + MaxRetries) × ReadTimeout plus go-redis's retry backoff
// (the doc said ReadTimeout alone, and Close took twice that with the
// default MaxRetries).
func TestCloseBoundedByReadTimeout(t *testing.T) {
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
			// Backoff: at most 512 ms per retry (go-redis's MaxRetryBackoff);
			// and a second for scheduling on a loaded machine.
			bound := time.Duration(1+retries)*rt + time.Duration(retries)*512*time.Millisecond + time.Second
			if el > bound {
				t.Errorf("Close took %v, documented bound (1 + MaxRetries) × ReadTimeout + backoff is %v", el, bound)
			}
		})
	}
}

// Close "waits for the round trips in flight to come back": bounded by
// one round trip (here ~5 ms of link latency, ReadTimeout 300 ms), even
// while callers keep deciding (decisions after Close still work). A Close
// that waited for the later round trips too would not return while the
// callers run: the 10 s bound is a hang bound; the time is logged.
func TestCloseReturnsUnderSustainedLoad(t *testing.T) {
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
	case <-time.After(10 * time.Second):
		t.Errorf("Close did not return within 10 s while callers kept deciding (each round trip ~5 ms)")
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

// Close "waits for the round trips in flight when it is called (not for
// those that decisions after it start)". A stalled server, ReadTimeout
// 300 ms: one round trip in flight at Close; decisions after Close keep
// starting round trips (Close turns the breaker off). Promised: Close
// returns about 300 ms after the first round trip started (logged). A
// Close that waited for the later ones would not return while the callers
// run: the 10 s bound is a hang bound.
func TestCloseIgnoresLaterRoundTrips(t *testing.T) {
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
	case <-time.After(10 * time.Second):
		took = -1
	}
	close(stop)
	s.Signal(syscall.SIGCONT)
	wg.Wait()
	t.Logf("Close returned %v after the first round trip started", took)
	if took < 0 {
		t.Errorf("Close did not return within 10 s while later decisions kept starting round trips; the one in flight at Close ended by ~300 ms")
	}
}
