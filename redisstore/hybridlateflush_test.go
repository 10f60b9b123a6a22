package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// gateHook holds a pipeline's replies, after Redis ran it, while closed:
// a flush whose reply comes back late.
type gateHook struct {
	armed   atomic.Bool
	held    chan struct{} // a pipeline's reply is being held
	release chan struct{}
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.armed.CompareAndSwap(true, false) {
			h.held <- struct{}{}
			<-h.release
		}
		return err
	}
}

// A lone hybrid replica (R = 1) whose flush reply comes back after its
// own exact decisions (costs above maxLocal) filled the key: the late
// reply's count is older than those decisions, and must not let the
// replica admit past the limit. WithHybrid's bound for R = 1: a local
// admission leaves Q ≤ Limit, an exact one Q ≤ Limit + the units admitted
// locally while it was in flight (none here: one caller).
func TestHybridLateFlushReplyAfterExactDecisions(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	h := &gateHook{held: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(h)
	const limit, maxLocal = 100, 3
	cfg := engine.Config{Limit: limit, Window: time.Hour, Algorithm: engine.SlidingWindowStrict}
	for round := range 3 {
		key := []string{"a", "b", "c"}[round]
		l := mustNew(t, c, cfg, WithHybrid(time.Second, maxLocal), WithReplicas(1), withManual())
		var admitted int64
		allow := func(n int64) engine.Decision {
			d, err := l.AllowN(ctx, key, n)
			if err != nil {
				t.Fatalf("AllowN(%d): %+v %v", n, d, err)
			}
			if d.Allowed {
				admitted += n
			}
			return d
		}
		allow(1) // exact: the first observation
		for range 10 + round*5 {
			allow(1) // local, pending
		}
		h.armed.Store(true)
		var wg sync.WaitGroup
		wg.Go(l.flushNow)
		<-h.held // Redis ran the flush; its reply is held
		for allow(maxLocal + 1).Allowed {
		} // exact decisions fill the key
		for range 5 {
			allow(1)
		}
		h.release <- struct{}{}
		wg.Wait()
		for range 3 { // local decisions, each share renewed by a flush
			for range 2 * limit {
				allow(1)
			}
			l.flushNow()
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		stored := storedUnits(t, c, l, key)
		t.Logf("round %d: admitted %d, stored %d, stats %+v", round, admitted, stored, l.Stats())
		if admitted > limit {
			t.Errorf("round %d: %d admitted by one replica, above the limit %d", round, admitted, limit)
		}
		if st := l.Stats(); st.LostUnits == 0 && stored != admitted {
			t.Errorf("round %d: Redis holds %d, %d admitted and none lost", round, stored, admitted)
		}
	}
}
