package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
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
func TestReview5CloseRacesEverything(t *testing.T) {
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
					var cx context.Context = context.Background()
					cancel := func() {}
					switch r.IntN(3) {
					case 1:
						var cf context.CancelFunc
						cx, cf = context.WithCancel(cx)
						tm := time.AfterFunc(time.Duration(r.IntN(3000))*time.Microsecond, cf)
						cancel = func() { tm.Stop(); cf() }
					case 2:
						var cf context.CancelFunc
						cx, cf = context.WithTimeout(cx, time.Duration(100+r.IntN(3000))*time.Microsecond)
						cancel = cf
					}
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
		if closeTook > 2*time.Second {
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

// Key escaping: distinct user keys give distinct Redis keys and counters,
// including the empty key's "\e" against user keys that look like it.
func TestReview5KeyEscaping(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 100, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	keys := []string{"", "\\e", "\\", "e", "\\\\e", "\\(", "{", "}", "(", ")", "\\)", "{}", "\\e}", "}\\e", "\x1b", "\\\\", "\\{", "\\(e", "e\\"}
	seen := map[string]string{}
	for _, k := range keys {
		rk := l.Key(k)
		if o, ok := seen[rk]; ok {
			t.Errorf("user keys %q and %q share Redis key %q", o, k, rk)
		}
		seen[rk] = k
	}
	// brute force short keys over the alphabet of special characters
	alpha := []string{"\\", "{", "}", "e", "(", ")"}
	var gen func(prefix string, depth int)
	gen = func(prefix string, depth int) {
		rk := l.Key(prefix)
		if o, ok := seen[rk]; ok && o != prefix {
			t.Errorf("user keys %q and %q share Redis key %q", o, prefix, rk)
		}
		seen[rk] = prefix
		if depth == 0 {
			return
		}
		for _, a := range alpha {
			gen(prefix+a, depth-1)
		}
	}
	gen("", 5)
	for i, k := range keys {
		if _, err := l.AllowN(ctx, k, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		if got := storedUnits(t, c, l, k); got != int64(i+1) {
			t.Errorf("key %q (%q) holds %d units, want %d", k, l.Key(k), got, i+1)
		}
	}
}
