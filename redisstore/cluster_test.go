package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// One Cluster node stalls (SIGSTOP); callers with 20 ms deadlines use keys
// on every node. Promise: "one node down leaves the other nodes' keys to
// Redis" (one breaker per master node). Observed: keys on healthy nodes.
func TestClusterStalledNodeLeavesOthersClosed(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr()}, MaxRetries: -1, PoolSize: 64,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	defer cc.Close()
	l := mustNew(t, cc, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	stalledAddr := nodes[0].Addr()
	var onStalled, onHealthy []string
	for i := 0; len(onStalled) < 4 || len(onHealthy) < 4; i++ {
		k := fmt.Sprint("key", i)
		m, err := cc.MasterForKey(ctx, l.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == stalledAddr {
			if len(onStalled) < 4 {
				onStalled = append(onStalled, k)
			}
		} else if len(onHealthy) < 4 {
			onHealthy = append(onHealthy, k)
		}
	}
	for _, k := range append(append([]string{}, onStalled...), onHealthy...) {
		if _, err := l.AllowN(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	var stalled atomic.Bool
	var healthyReal, healthyPolicy, healthyBreaker atomic.Int64
	var sample atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		k := onStalled[i%4]
		healthy := i >= 4
		if healthy {
			k = onHealthy[i%4]
		}
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				_, err := l.AllowN(cx, k, 1)
				cancel()
				if healthy && stalled.Load() {
					if err == nil {
						healthyReal.Add(1)
					} else {
						healthyPolicy.Add(1)
						if strings.Contains(err.Error(), "breaker is open") {
							healthyBreaker.Add(1)
						}
						sample.Store(err.Error())
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	nodes[0].Signal(syscall.SIGSTOP)
	time.Sleep(100 * time.Millisecond)
	stalled.Store(true)
	time.Sleep(1500 * time.Millisecond)
	stalled.Store(false)
	close(stop)
	wg.Wait()
	nodes[0].Signal(syscall.SIGCONT)
	t.Logf("healthy-node keys during the stall: %d Redis answers, %d policy answers (%d by an open breaker); e.g. %v; stats %+v",
		healthyReal.Load(), healthyPolicy.Load(), healthyBreaker.Load(), sample.Load(), l.Stats())
	// That the healthy nodes' keys wait behind the stalled node's round
	// trips (both senders held until the client's ReadTimeout) is the
	// documented limit (WithBreaker); opening their breakers is not.
	if healthyBreaker.Load() > 0 || l.Stats().BreakerOpens > 1 {
		t.Errorf("healthy nodes' breakers opened while one other node stalled: %d answers by an open breaker, %d openings", healthyBreaker.Load(), l.Stats().BreakerOpens)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel() // waits mostly on cluster or replica set-up
	nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	l := mustNew(t, cc, engine.Config{Limit: 3, Window: time.Minute, SubWindows: 12})
	slots := map[int64]bool{}
	for i := range 300 {
		k := fmt.Sprintf("tenant-%d", i)
		if i%3 == 0 {
			k = fmt.Sprintf("{t%d}x{", i)
		}
		for j := range 4 {
			d, _, err := l.eval(ctx, k, 1, 0) // eval: any CROSSSLOT would surface here
			if err != nil {
				t.Fatalf("key %q: %v", k, err)
			}
			if d.Allowed != (j < 3) {
				t.Fatalf("key %q step %d: %+v", k, j, d)
			}
		}
		slot, err := cc.ClusterKeySlot(ctx, l.Key(k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	var perNode []int64
	for _, s := range nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		n, err := c.DBSize(ctx).Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		perNode = append(perNode, n)
	}
	for i, n := range perNode {
		if n == 0 {
			t.Fatalf("node %d holds no key: %v", i, perNode)
		}
	}
	if len(slots) < 200 || l.Stats().Failures != 0 {
		t.Fatalf("%d slots, stats %+v", len(slots), l.Stats())
	}
	// Concurrent callers: their calls share pipelines, which the cluster
	// client splits by node; each caller's own key counts exactly. Every
	// node has lost the script first: a pipeline's EVAL reaches one node,
	// and the calls on the others go again as EVAL.
	for _, s := range nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		err := c.ScriptFlush(ctx).Err()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	before := l.Stats().NoScript
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Go(func() {
			key := fmt.Sprintf("conc-%d", i)
			for j := range 5 {
				d, err := l.AllowN(ctx, key, 1)
				if err != nil || d.Allowed != (j < 3) || d.Remaining != int64(max(0, 2-j)) {
					errs <- fmt.Errorf("key %q step %d: %+v %v", key, j, d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := l.Stats(); st.NoScript == before || st.Failures != 0 {
		t.Fatalf("after SCRIPT FLUSH on every node: stats %+v (NoScript before %d)", st, before)
	}
}

// TestClusterEmptyKeyKeepsSlot: "the geometry, after the tag, never changes the
// slot" and "a request touches one slot and never gets CROSSSLOT". For the
// empty user key the tag is "{}", which Redis Cluster does not treat as a
// hash tag: the whole name is hashed.
func TestClusterEmptyKeyKeepsSlot(t *testing.T) {
	t.Parallel() // waits mostly on cluster or replica set-up
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr()}, MaxRetries: -1})
	defer cc.Close()
	ctx := context.Background()
	var slots []int64
	for _, w := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second, 7 * time.Second} {
		l, err := New(cc, engine.Config{Limit: 10, Window: w})
		if err != nil {
			t.Fatal(err)
		}
		slot, err := cc.ClusterKeySlot(ctx, l.Key("")).Result()
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		slots = append(slots, slot)
	}
	t.Logf("slots of the empty key under 5 geometries: %v", slots)
	for _, s := range slots[1:] {
		if s != slots[0] {
			t.Errorf("the geometry moved the empty key to another slot: %v", slots)
			break
		}
	}
	// The hybrid mode's dedup key must share the state key's slot.
	var errs []error
	l, err := New(cc, engine.Config{Limit: 1000, Window: time.Second}, WithHybrid(5*time.Millisecond, 10), WithOnError(func(e error) { errs = append(errs, e) }))
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		_, err := l.AllowN(ctx, "", 1)
		if err != nil {
			t.Errorf("hybrid decision on the empty key: %v", err)
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Errorf("hybrid Close: %v", err)
	}
	st := l.Stats()
	t.Logf("hybrid stats %+v errs %v", st, errs)
	if st.Failures != 0 || st.LostUnits != 0 {
		t.Errorf("hybrid on the empty key in a Cluster: %+v %v", st, errs)
	}
}

// The empty user key in a Cluster: its probe key (same "hash tag" {}) lands on
// another node, so while the key's node is down the breaker is closed by a
// probe that succeeds elsewhere, and reopens on the next decision.
func TestClusterBreakerProbesOnKeysNode(t *testing.T) {
	t.Parallel() // waits mostly on cluster or replica set-up
	for _, uk := range []string{"", "control"} {
		t.Run(uk, func(t *testing.T) { t.Parallel(); clusterBreakerOnKeysNode(t, uk) })
	}
}

func clusterBreakerOnKeysNode(t *testing.T, uk string) {
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr()}, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	defer cc.Close()
	ctx := context.Background()
	var l *Limiter
	var owner, probeOwner string
	for w := 1; w < 30; w++ {
		l2, err := New(cc, engine.Config{Limit: 1 << 20, Window: time.Duration(w) * time.Second, Algorithm: engine.SlidingWindowStrict})
		if err != nil {
			t.Fatal(err)
		}
		a, err1 := cc.MasterForKey(ctx, l2.Key(uk))
		b, err2 := cc.MasterForKey(ctx, l2.Key(uk)+":probe")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if (uk == "" && a.Options().Addr != b.Options().Addr) || uk != "" {
			l, owner, probeOwner = l2, a.Options().Addr, b.Options().Addr
			break
		}
		l2.Close()
	}
	if l == nil {
		t.Skip("no geometry found")
	}
	defer l.Close()
	t.Logf("key %q on %s, its probe key on %s", l.Key(uk), owner, probeOwner)
	if _, err := l.AllowN(ctx, uk, 1); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Addr() == owner {
			n.Kill()
		}
	}
	end := time.Now().Add(1500 * time.Millisecond)
	calls := 0
	for time.Now().Before(end) {
		cx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, _ = l.AllowN(cx, uk, 1)
		cancel()
		calls++
		time.Sleep(5 * time.Millisecond)
	}
	st := l.Stats()
	t.Logf("%d calls while the node was down: %+v", calls, st)
	// Correct breaker: one opening, probes at doubling intervals up to 500ms:
	// a handful of failures.
	if st.BreakerOpens > 2 {
		t.Errorf("the breaker reopened %d times while the key's node stayed down: closed by probes on another node", st.BreakerOpens)
	}
}

// With a ClusterClient the breakers are per master node: one node killed
// opens its own breaker, and keys on the other nodes keep being decided
// by Redis. After the node's restart (same port and cluster config, no
// data), one probe closes its breaker.
func TestBreakerClusterNode(t *testing.T) {
	t.Parallel() // waits mostly on cluster or replica set-up
	nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	defer cc.Close()
	var hook hookCounter
	l := mustNew(t, cc, engine.Config{Limit: 10, Window: time.Minute}, withManual(), hook.opt())
	owner := func(key string) string {
		c, err := cc.MasterForKey(ctx, l.Key(key))
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	// Two keys on different nodes; kill the first one's node.
	down, up := "a", ""
	for i := range 100 {
		if k := fmt.Sprint("b", i); owner(k) != owner(down) {
			up = k
			break
		}
	}
	if up == "" {
		t.Fatal("no key on another node")
	}
	for _, k := range []string{down, up} {
		if _, err := l.AllowN(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	var dead *redistest.Server
	for _, s := range nodes {
		if s.Addr() == owner(down) {
			dead = s
		}
	}
	dead.Kill()
	if _, err := l.AllowN(ctx, down, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the dead node's key: %v", err)
	}
	for i := range 20 {
		if _, err := l.AllowN(ctx, down, 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "breaker is open") {
			t.Fatalf("the dead node's key, decision %d: %v", i, err)
		}
		if d, err := l.AllowN(ctx, up, 0); err != nil || !d.Allowed {
			t.Fatalf("a live node's key while another node is down: %+v %v", d, err)
		}
	}
	if st := l.Stats(); st.Failures != 1 || st.BreakerOpens != 1 || st.RedisDecisions != 22 || hook.n.Load() != 1 {
		t.Fatalf("%+v", st)
	}
	pb := l.breakerFor(ctx, down, false)
	if pb == nil || l.breakerFor(ctx, up, false) != nil {
		t.Fatal("the breakers are not per node")
	}
	if pb.probeOnce() {
		t.Fatal("a probe closed the dead node's breaker")
	}
	// The restarted node answers PING at once but CLUSTERDOWN to scripts
	// until it has rejoined: the probes fail until then.
	dead.Start()
	for start := time.Now(); !pb.probeOnce(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("no recovery after the node's restart: %v", pb.err())
		}
	}
	t.Logf("probes that failed after the restart: %d", l.Stats().Failures-2)
	if d, err := l.AllowN(ctx, down, 1); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}

	// Close with a node's prober running: it ends, nothing is left.
	l2, err := New(cc, engine.Config{Limit: 10, Window: time.Minute}, WithBreaker(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	dead.Kill()
	if _, err := l2.AllowN(ctx, down, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	waitUntil(t, "failing probes", func() bool { return l2.Stats().Failures >= 3 }, func() any { return l2.Stats() })
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	noneLeft(t)
}
