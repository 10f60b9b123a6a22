package redisstore

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Sixteen hybrid replicas (WithReplicas 16, the default) on one server
// hammer one key, each with concurrent callers (some with deadlines, some
// cancelling), with the default linger, until each caller has seen the
// window full 20 times. WithHybrid promises, with every
// flush within half an interval, Q ≤ Limit + (R − 1) × max(3 × maxLocal,
// Limit / replicas) (+ maxLocal for an exact decision in flight), and near
// the limit, once every allowance is maxLocal, Limit + (R − 1) × 3 ×
// maxLocal. "near": the key is filled first to a headroom below
// 3 × replicas × (maxLocal + 1), so every replica's first observation
// already sizes its allowance at maxLocal. Whatever the flushes' delay,
// once every replica has closed (its last flush) with no unit lost, Redis
// holds the units admitted, and more only by calls whose error said Redis
// may have counted them: a batch is added at most once.
func TestHybridSixteenReplicasOneKey(t *testing.T) {
	s := redistest.Start(t)
	const R, maxLocal = 16, 2
	cfg := engine.Config{Limit: 300, Window: time.Hour, Algorithm: engine.SlidingWindowStrict}
	for _, tc := range []struct {
		name    string
		prefill int64
		bound   int64
	}{
		{"near", 250, cfg.Limit + (R-1)*3*maxLocal + maxLocal},
		{"empty", 0, cfg.Limit + (R-1)*max(3*maxLocal, cfg.Limit/R) + maxLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "h16" + tc.name + ":"
			admin := client(t, s)
			if tc.prefill > 0 {
				plain := mustNew(t, admin, cfg, WithPrefix(prefix))
				if d, err := plain.AllowN(ctx, "k", tc.prefill); err != nil || !d.Allowed {
					t.Fatalf("prefill: %+v %v", d, err)
				}
			}
			var ls []*Limiter
			for range R {
				c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
				t.Cleanup(func() { _ = c.Close() })
				l, err := New(c, cfg, WithPrefix(prefix), WithHybrid(50*time.Millisecond, maxLocal), WithReplicas(R))
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			var admitted, errs, mayCount atomic.Int64
			var wg sync.WaitGroup
			for i, l := range ls {
				for g := range 3 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(uint64(i), uint64(g)))
						for full, calls := 0, 0; full < 20 && calls < 3000; calls++ {
							cx, cancel := context.Background(), context.CancelFunc(func() {})
							switch r.IntN(3) {
							case 0:
								cx, cancel = context.WithTimeout(cx, time.Duration(r.IntN(3000))*time.Microsecond)
							case 1:
								cx, cancel = context.WithCancel(cx)
								tm := time.AfterFunc(time.Duration(r.IntN(2000))*time.Microsecond, cancel)
								defer tm.Stop()
							}
							d, err := l.AllowN(cx, "k", 1)
							cancel()
							if err != nil {
								errs.Add(1)
								if strings.Contains(err.Error(), "may have counted") {
									mayCount.Add(1)
								}
							} else if d.Allowed {
								admitted.Add(1)
							} else if d.Remaining < 1 {
								full++ // a full window's denial
							}
						}
					})
				}
			}
			wg.Wait()
			var slow, lost, opens, gone uint64
			for _, l := range ls {
				if err := l.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				st := l.Stats()
				slow += st.SlowFlushes
				lost += st.LostUnits
				opens += st.BreakerOpens
				gone += st.CallerGone
			}
			total := tc.prefill + admitted.Load()
			stored := storedUnits(t, admin, ls[0], "k")
			t.Logf("%s: prefill %d + admitted %d = %d (bound %d), stored %d, errors %d (caller gone %d, may have counted %d), SlowFlushes %d, LostUnits %d, BreakerOpens %d",
				tc.name, tc.prefill, admitted.Load(), total, tc.bound, stored, errs.Load(), gone, mayCount.Load(), slow, lost, opens)
			if total > tc.bound && slow == 0 {
				t.Errorf("%d units in one window, above the bound %d with no slow flush", total, tc.bound)
			}
			if opens != 0 {
				t.Errorf("a healthy server put a replica in its failure state %d times", opens)
			}
			if uint64(errs.Load()) != gone {
				t.Errorf("%d errors, %d of them callers gone: others on a healthy server", errs.Load(), gone)
			}
			if lost == 0 && (stored < total || stored > total+mayCount.Load()) {
				t.Errorf("Redis holds %d units, but %d were admitted (prefill included), none lost, and %d errors said Redis may have counted the call", stored, total, mayCount.Load())
			}
		})
	}
}
