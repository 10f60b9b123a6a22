package redisstore

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Issue 15, item 3: Close flushes what was admitted, and decisions after
// Close go to Redis, exactly.
func TestHybridClose(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 100, Window: time.Minute}, WithHybrid(5*time.Millisecond, 10), withManual())
	for range 5 {
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := storedUnits(t, c, l, "k"); got != 5 {
		t.Fatalf("after Close Redis holds %d units, want 5", got)
	}
	before := l.Stats()
	if before.Flushes != 1 || before.LostUnits != 0 {
		t.Fatalf("after Close, whose last flush recorded every unit: stats %+v, want Flushes 1 (the last flush)", before)
	}
	admitted := 5
	for range 100 {
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	st := l.Stats()
	if admitted != 100 || st.RedisDecisions != before.RedisDecisions+100 || st.LocalDecisions != before.LocalDecisions {
		t.Fatalf("after Close: admitted %d of 105, stats %+v", admitted, st)
	}
	if got := storedUnits(t, c, l, "k"); got != 100 {
		t.Fatalf("Redis holds %d units, want 100", got)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// Close while callers run behind 20 ms of latency per reply: every unit
// admitted before, during and after Close is in Redis once Close and the
// callers are done. Concurrent Close calls all wait for the first.
func TestHybridCloseRacingCallers(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), PoolSize: 64})
	defer c.Close()
	l, err := New(c, engine.Config{Limit: 1_000_000, Window: time.Minute}, WithHybrid(5*time.Millisecond, 50))
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d"}
	p.delay.Store(int64(20 * time.Millisecond))
	var admitted, decided, afterClose atomic.Int64
	var closed atomic.Bool
	ready, enough, stop := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var readyOnce, enoughOnce sync.Once
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := int64(1 + i%3)
				d, err := l.AllowN(ctx, keys[(g+i)%len(keys)], n)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(n)
				}
				if decided.Add(1) == 2000 {
					readyOnce.Do(func() { close(ready) })
				}
				if closed.Load() && afterClose.Add(1) == 200 {
					enoughOnce.Do(func() { close(enough) })
				}
			}
		})
	}
	<-ready
	var cwg sync.WaitGroup
	for range 3 {
		cwg.Go(func() {
			if err := l.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	cwg.Wait()
	closed.Store(true)
	<-enough
	close(stop)
	wg.Wait()
	p.delay.Store(0)
	if got := storedUnits(t, client(t, s), l, keys...); got != admitted.Load() {
		t.Fatalf("admitted %d units, Redis holds %d (stats %+v)", admitted.Load(), got, l.Stats())
	}
	if st := l.Stats(); st.LostUnits != 0 || st.Failures != 0 || st.LocalDecisions == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Close with Redis down: it returns, says how many units it could not
// record, and the error wraps ErrUnavailable.
func TestHybridCloseRedisDown(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Limit: 100, Window: time.Minute}, WithHybrid(5*time.Millisecond, 10), withManual())
	for range 4 {
		if _, err := l.AllowN(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	s.Kill()
	err := l.Close()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "3 units admitted on 1 keys") {
		t.Fatalf("Close: %v", err)
	}
	if st := l.Stats(); st.LostUnits != 3 || st.Flushes != 0 {
		t.Fatalf("stats %+v, want LostUnits 3 and Flushes 0 (the last flush failed)", st)
	}
}

// Close ends every goroutine the limiter started: the flusher, the prober
// and the round trips.
func TestHybridCloseEndsGoroutines(t *testing.T) {
	s := redistest.Start(t)
	l, err := New(client(t, s), engine.Config{Limit: 50, Window: time.Minute}, WithHybrid(time.Millisecond, 10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if _, err := l.AllowN(ctx, "x", 1); !errors.Is(err, ErrUnavailable) { // opens the failure state: the prober runs
		t.Fatal(err)
	}
	// (A goroutine just started shows as (*breaker).trip.gowrap.)
	if st := stacks(); !strings.Contains(st, "redisstore.(*breaker)") || !strings.Contains(st, "redisstore.(*hybrid).run") {
		t.Fatalf("the prober or the flusher is not running (%+v):\n%s", l.Stats(), st)
	}
	_ = l.Close()
	noneLeft(t)
}
