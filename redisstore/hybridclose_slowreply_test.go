package redisstore

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Close behind replies slower than a flush's deadline (500 ms here), with
// go-redis's default retries on: the server runs every batch as it
// arrives, the replies come late, so flushes and Close's last flush are
// given up on and their batches sent again (and retried by go-redis).
// "Redis adds a batch at most once", and "every unit admitted before Close
// is recorded" unless Close's error says how many were not: once the
// replies are all in, Redis holds at least the units admitted less those
// reported lost, and no more than the units admitted plus those of calls
// whose error said Redis may have counted them.
func TestHybridCloseSlowRepliesCountOnce(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr()}) // go-redis defaults: retries on
	t.Cleanup(func() { _ = c.Close() })
	cfg := engine.Config{Limit: 1_000_000, Window: time.Minute}
	l := mustNew(t, c, cfg, WithHybrid(5*time.Millisecond, 10), WithReplicas(1))
	var admitted, maybe atomic.Int64
	decide := func() {
		d, err := l.AllowN(ctx, "k", 1)
		switch {
		case err == nil && d.Allowed:
			admitted.Add(1)
		case err != nil && !errors.Is(err, ErrUnavailable):
			maybe.Add(1) // ErrNoReply, a caller gone: Redis may have counted it
		}
	}
	for range 200 {
		decide()
	}
	waitUntil(t, "a flush", func() bool { return l.Stats().Flushes > 0 }, func() any { return l.Stats() })
	p.delay.Store(int64(700 * time.Millisecond))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 300 {
				decide()
			}
		}()
	}
	wg.Wait()
	cerr := l.Close()
	st := l.Stats()
	p.delay.Store(0)
	d := client(t, s)
	// The proxy forwards commands at once: every batch sent has run. Wait
	// until the late replies have drained (a PING through the proxy).
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	stored := storedUnits(t, d, l, "k")
	t.Logf("admitted %d (+%d maybe), stored %d, Close: %v, stats %+v", admitted.Load(), maybe.Load(), stored, cerr, st)
	if cerr != nil && !errors.Is(cerr, ErrUnavailable) {
		t.Errorf("Close: %v, want nil or an error wrapping ErrUnavailable", cerr)
	}
	if stored < admitted.Load()-int64(st.LostUnits) {
		t.Errorf("Redis holds %d units, fewer than the %d admitted less the %d reported lost", stored, admitted.Load(), st.LostUnits)
	}
	if stored > admitted.Load()+maybe.Load() {
		t.Errorf("Redis holds %d units, more than the %d admitted and the %d that may have been counted: a batch added twice", stored, admitted.Load(), maybe.Load())
	}
}
