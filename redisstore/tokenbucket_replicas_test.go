package redisstore

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Across replicas it is exact: 4 limiters (each with its own client) × 4
// goroutines on one key admit exactly Burst between them, at a rate (1 per
// hour) that refills nothing while the test runs.
func TestTokenBucketReplicasAdmitExactlyBurst(t *testing.T) {
	s := redistest.Start(t)
	const burst = 300
	cfg := engine.Config{Algorithm: engine.TokenBucket, Limit: 1, Window: time.Hour, Burst: burst}
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for range 4 {
		l := mustNew(t, client(t, s), cfg)
		for range 4 {
			wg.Go(func() {
				for range 150 {
					d, err := l.AllowN(ctx, "shared", 1)
					if err != nil {
						errc <- err
						return
					}
					if d.Allowed {
						admitted.Add(1)
					} else if d.RetryAfter <= 0 || d.RetryAfter > time.Hour || d.Limit != burst {
						errc <- fmt.Errorf("a denial %+v: want Limit %d and 0 < RetryAfter ≤ 1h", d, burst)
						return
					} else {
						denied.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if got := admitted.Load(); got != burst || denied.Load() != 4*4*150-burst {
		t.Fatalf("admitted %d (denied %d) across 4 limiters × 4 goroutines, want exactly %d", got, denied.Load(), burst)
	}
}

// Across replicas as time moves: 4 limiters × 4 goroutines (pipelined
// through each limiter's batcher) on one key whose bucket refills while
// they run. Redis runs the scripts one at a time on a clock that does not
// go back, so the decisions, sorted by the time each script reports (the
// admissions of one µs first: the requests are alike), replay through
// the exact model decision for decision; and every run of admissions
// between two instants s ≤ u holds at most Burst + ⌊(u − s)·Limit/Window⌋.
func TestTokenBucketReplicasMatchModelAsTimeMoves(t *testing.T) {
	s := redistest.Start(t)
	const limit, burst = 2000, 5
	const window = time.Second // T = 500 µs
	cfg := engine.Config{Algorithm: engine.TokenBucket, Limit: limit, Burst: burst, Window: window}
	type rec struct {
		at      int64
		allowed bool
	}
	var mu sync.Mutex
	var recs []rec
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for range 4 {
		l := mustNew(t, client(t, s), cfg)
		for range 4 {
			wg.Go(func() {
				for range 200 {
					d, at, err := l.batch.do(ctx, "moving", 1, limit, 0)
					if err != nil {
						errc <- err
						return
					}
					mu.Lock()
					recs = append(recs, rec{at.UnixMicro(), d.Allowed})
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	slices.SortStableFunc(recs, func(x, y rec) int {
		if c := cmp.Compare(x.at, y.at); c != 0 {
			return c
		}
		if x.allowed == y.allowed {
			return 0
		}
		if x.allowed {
			return -1
		}
		return 1
	})
	m := newGCRAModel(limit, burst, window)
	var admits []int64
	for i, r := range recs {
		if ok, _, _ := m.decide(r.at, 1); ok != r.allowed {
			t.Fatalf("decision %d of %d at %d µs: allowed %v, the model %v", i, len(recs), r.at, r.allowed, ok)
		}
		if r.allowed {
			admits = append(admits, r.at)
		}
	}
	for i := range admits {
		for j := i; j < len(admits); j++ {
			if bound := burst + (admits[j]-admits[i])*limit/int64(window/time.Microsecond); int64(j-i+1) > bound {
				t.Fatalf("%d admissions in [%d, %d] µs, bound %d", j-i+1, admits[i], admits[j], bound)
			}
		}
	}
	if len(admits) <= burst {
		t.Logf("only %d admissions: the run was shorter than one emission interval", len(admits))
	}
}

// Redis Cluster: a key's state is one key in its hash tag's slot, and keys
// spread over the nodes; each key's bucket holds exactly Burst.
func TestTokenBucketCluster(t *testing.T) {
	t.Parallel() // waits mostly on the cluster's set-up
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes)})
	defer cc.Close()
	l := mustNew(t, cc, engine.Config{Algorithm: engine.TokenBucket, Limit: 1, Burst: 2, Window: time.Hour})
	slots := map[int64]bool{}
	for i := range 60 {
		k := fmt.Sprintf("tenant-%d", i)
		if i%3 == 0 {
			k = fmt.Sprintf("{t%d}x{", i)
		}
		for j := range 3 {
			d, _, err := l.eval(ctx, k, 1, 0) // any CROSSSLOT would surface here
			if err != nil {
				t.Fatalf("key %q: %v", k, err)
			}
			if d.Allowed != (j < 2) {
				t.Fatalf("key %q step %d: %+v", k, j, d)
			}
		}
		slot, err := cc.ClusterKeySlot(ctx, l.Key(k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) < 30 {
		t.Fatalf("60 keys in %d slots", len(slots))
	}
}
