package redisstore

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Three hybrid replicas on one key: the total stays within the documented
// bound, L + (R−1)·2·maxLocal, and every admitted unit reaches Redis.
func TestHybridBound(t *testing.T) {
	s := startRedis(t)
	const (
		limit    = 200
		replicas = 3
		maxLocal = 5
	)
	cfg := engine.Config{Limit: limit, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	var ls []*Limiter
	for range replicas {
		l := mustNew(t, s.client(), cfg, WithHybrid(5*time.Millisecond, maxLocal))
		ls = append(ls, l)
		for range 2 {
			wg.Go(func() {
				for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); {
					d, err := l.AllowN(ctx, "hot", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					} else {
						time.Sleep(100 * time.Microsecond)
					}
				}
			})
		}
	}
	wg.Wait()
	for _, l := range ls {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if st := l.Stats(); st.Failures != 0 {
			t.Fatalf("stats %+v", st)
		}
	}
	got := admitted.Load()
	if bound := int64(limit + (replicas-1)*2*maxLocal); got > bound || got < limit-replicas*maxLocal {
		t.Fatalf("admitted %d, want within [%d, %d]", got, limit-replicas*maxLocal, bound)
	}
	fields, err := s.client().HGetAll(ctx, ls[0].Key("hot")).Result()
	if err != nil {
		t.Fatal(err)
	}
	var stored int64
	for f, v := range fields {
		if f != "l" {
			n, _ := strconv.ParseInt(v, 10, 64)
			stored += n
		}
	}
	if stored != got {
		t.Fatalf("Redis holds %d units, the replicas admitted %d", stored, got)
	}
	t.Logf("admitted %d of limit %d across %d hybrid replicas", got, limit, replicas)
}

func TestHybridFailure(t *testing.T) {
	s := startRedis(t)
	var hook atomic.Int64
	l := mustNew(t, s.client(), engine.Config{Limit: 50, Window: time.Minute}, WithHybrid(2*time.Millisecond, 10), WithOnError(func(error) { hook.Add(1) }))
	if ok, err := l.Allow(ctx, "k"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	s.kill()
	if ok, _ := l.Allow(ctx, "k"); !ok {
		t.Fatal("the local decision before the failed flush should admit")
	}
	deadline := time.Now().Add(3 * time.Second)
	for l.Stats().Failures == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ok, _ := l.Allow(ctx, "k"); ok {
		t.Fatalf("FailClosed after a failed flush admitted: %+v", l.Stats())
	}
	if hook.Load() == 0 || l.Stats().FallbackDecisions == 0 {
		t.Fatalf("stats %+v, hook %d", l.Stats(), hook.Load())
	}
	s.start()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ok, _ := l.Allow(ctx, "k"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery: %+v", l.Stats())
		}
	}
}
