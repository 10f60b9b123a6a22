package redisstore

import (
	"context"
	"errors"
	"fmt"
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

// On a 3-master Cluster, with the longest linger, concurrent callers (some
// with deadlines shorter than the linger, some cancelling) on keys spread
// over every master: the plain mode admits no key past its limit, Redis
// holds every admission and more only by calls whose error said Redis may
// have counted them; four hybrid replicas on the same keys lose no unit
// and add none twice once closed. No breaker opens on a healthy Cluster.
func TestLingerClusterKeysAcrossMasters(t *testing.T) {
	t.Parallel() // waits mostly on cluster set-up
	nodes := redistest.StartCluster(t, 3)
	newCC := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes), MaxRetries: -1,
			ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	admin := newCC()
	const limit, nkeys = 150, 12
	cfg := engine.Config{Limit: limit, Window: time.Hour, Algorithm: engine.SlidingWindowStrict}
	keys := make([]string, nkeys)
	masters := map[string]bool{}
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
	}
	run := func(ls []*Limiter, callers, calls int) (admitted []atomic.Int64, mayCount *atomic.Int64) {
		admitted = make([]atomic.Int64, nkeys)
		mayCount = new(atomic.Int64)
		var wg sync.WaitGroup
		for g := range callers {
			l := ls[g%len(ls)]
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 3))
				for i := range calls {
					k := (g + i) % nkeys
					cx, cancel := context.Background(), context.CancelFunc(func() {})
					switch r.IntN(3) {
					case 0:
						cx, cancel = context.WithTimeout(cx, time.Duration(r.IntN(1500))*time.Microsecond)
					case 1:
						cx, cancel = context.WithCancel(cx)
						tm := time.AfterFunc(time.Duration(r.IntN(1000))*time.Microsecond, cancel)
						defer tm.Stop()
					}
					d, err := l.AllowN(cx, keys[k], 1)
					cancel()
					switch {
					case err == nil:
						if d.Allowed {
							admitted[k].Add(1)
						}
					case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
						if strings.Contains(err.Error(), "may have counted") {
							mayCount.Add(1)
						}
					default:
						t.Errorf("on a healthy Cluster: %+v %v", d, err)
					}
				}
			})
		}
		wg.Wait()
		return admitted, mayCount
	}

	plain := mustNew(t, newCC(), cfg, WithLinger(time.Millisecond), WithPrefix("p:"))
	for _, k := range keys {
		m, err := admin.MasterForKey(ctx, plain.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the keys reach %d masters, want 3", len(masters))
	}
	admitted, mayCount := run([]*Limiter{plain}, 32, 80)
	var sumAdm int64
	for k := range keys {
		a := admitted[k].Load()
		sumAdm += a
		if a > limit {
			t.Errorf("plain: key %s admitted %d, limit %d", keys[k], a, limit)
		}
	}
	stored := storedUnits(t, admin, plain, keys...)
	t.Logf("plain: admitted %d, stored %d, may have counted %d, stats %+v", sumAdm, stored, mayCount.Load(), plain.Stats())
	if stored < sumAdm || stored > sumAdm+mayCount.Load() {
		t.Errorf("plain: Redis holds %d, %d admitted, %d may have counted", stored, sumAdm, mayCount.Load())
	}
	if st := plain.Stats(); st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
		t.Errorf("plain: a breaker opened on a healthy Cluster: %+v", st)
	}

	var hs []*Limiter
	for range 4 {
		l, err := New(newCC(), cfg, WithPrefix("h:"), WithHybrid(10*time.Millisecond, 2), WithReplicas(4))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, l)
	}
	admitted, mayCount = run(hs, 32, 80)
	var lost, opens uint64
	for _, l := range hs {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		st := l.Stats()
		lost += st.LostUnits
		opens += st.BreakerOpens
	}
	sumAdm = 0
	for k := range keys {
		sumAdm += admitted[k].Load()
	}
	stored = storedUnits(t, admin, hs[0], keys...)
	t.Logf("hybrid: admitted %d, stored %d, may have counted %d, lost %d, opens %d", sumAdm, stored, mayCount.Load(), lost, opens)
	if opens != 0 {
		t.Errorf("hybrid: %d failure states on a healthy Cluster", opens)
	}
	if lost == 0 && (stored < sumAdm || stored > sumAdm+mayCount.Load()) {
		t.Errorf("hybrid: Redis holds %d, %d admitted, none lost, %d may have counted", stored, sumAdm, mayCount.Load())
	}
}
