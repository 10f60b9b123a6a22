package redisstore

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The hybrid bound under a flood that starves the flusher (late flushes),
// on a healthy Redis. WithHybrid promises, for R replicas and costs at most
// maxLocal (every X_i = 0): a local admission leaves Q ≤ Limit + Σ_{i≠j}
// ((1 + c_i) × maxLocal), an exact one Q ≤ Limit + (R − 1) × maxLocal +
// maxLocal; with R = 1 that is Limit + maxLocal whatever the flushes' delay,
// and with every flush within half an interval (SlowFlushes 0), Limit +
// (R − 1) × 3 × maxLocal (+ maxLocal for an exact decision in flight).
// All units admitted here fall in one window (2 s of a 1 minute window).
func TestHybridBoundUnderFlood(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Limit: 100, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}
	for _, tc := range []struct {
		replicas int
		maxLocal int64
	}{{1, 2}, {1, 20}, {2, 2}, {2, 20}} {
		t.Run(fmt.Sprintf("R=%d/maxLocal=%d", tc.replicas, tc.maxLocal), func(t *testing.T) {
			if tc.replicas != 2 || tc.maxLocal != 2 {
				longOnly(t)
			}
			prefix := fmt.Sprintf("hb%d-%d:", tc.replicas, tc.maxLocal)
			var ls []*Limiter
			for range tc.replicas {
				c := redis.NewClient(&redis.Options{Addr: s.Addr()})
				defer c.Close()
				ls = append(ls, mustNew(t, c, cfg, WithFailurePolicy(FailOpen), WithPrefix(prefix), WithHybrid(5*time.Millisecond, tc.maxLocal)))
			}
			var wg sync.WaitGroup
			tallies := make([]*floodTally, len(ls))
			for i, l := range ls {
				wg.Go(func() {
					tallies[i] = floodWith(l, "k", floodShape{callers: 96 / tc.replicas, spinners: 16 / tc.replicas, maxDeadline: 3 * time.Millisecond, noDeadline: 8}, 2*time.Second)
				})
			}
			wg.Wait()
			var admitted int64
			var slow uint64
			for i, l := range ls {
				st := l.Stats()
				admitted += tallies[i].admitted.Load()
				slow += st.SlowFlushes
				t.Logf("replica %d: %s; Flushes %d, SlowFlushes %d, LostUnits %d", i, report(tallies[i], st), st.Flushes, st.SlowFlushes, st.LostUnits)
				if st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
					t.Errorf("replica %d: Redis answered throughout, yet BreakerOpens %d, FallbackDecisions %d", i, st.BreakerOpens, st.FallbackDecisions)
				}
			}
			r := int64(tc.replicas)
			bound := cfg.Limit + tc.maxLocal
			if r > 1 {
				bound = cfg.Limit + (r-1)*3*tc.maxLocal + tc.maxLocal
			}
			t.Logf("admitted %d in one window, Limit %d, bound %d (simple form; SlowFlushes %d)", admitted, cfg.Limit, bound, slow)
			if admitted > bound && (r == 1 || slow == 0) {
				t.Errorf("admitted %d in one window, above the bound %d", admitted, bound)
			}
		})
	}
}
