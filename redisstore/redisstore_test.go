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

var ctx = context.Background()

func mustNew(t *testing.T, c redis.UniversalClient, cfg engine.Config, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(c, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestConfigErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		cfg  engine.Config
		want string
	}{
		{engine.Config{Window: time.Second}, "Limit"},
		{engine.Config{Limit: 1}, "Window"},
		{engine.Config{Limit: 1, Window: time.Second, Algorithm: engine.SlidingLog}, "SlidingLog"},
		{engine.Config{Limit: 1, Window: 10 * time.Microsecond, SubWindows: 4}, "microseconds"},
		{engine.Config{Limit: 1e8, Window: 10 * time.Second, SubWindows: 10}, "2^53"},
		{engine.Config{Limit: 1, Window: 200 * 24 * time.Hour, SubWindows: 10}, "2^53"},
		{engine.Config{Limit: 1, Window: time.Second, PerKeyLimits: true}, "PerKeyLimits"},
	} {
		_, err := New(c, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	// Strict and Fixed have no product bound.
	if _, err := New(c, engine.Config{Limit: 1e8, Window: 10 * time.Second, Algorithm: engine.SlidingWindowStrict}); err != nil {
		t.Error(err)
	}
	if _, err := New(c, engine.Config{Limit: 1, Window: time.Second}, WithFallbackLocal(0)); err == nil {
		t.Error("share 0 accepted")
	}
}

// Several Limiters, each with its own client, share one key's limit from
// concurrent goroutines: together they admit exactly Limit.
func TestSharedLimit(t *testing.T) {
	s := redistest.Start(t)
	const limit = 300
	cfg := engine.Config{Limit: limit, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		l := mustNew(t, client(t, s), cfg)
		for range 4 {
			wg.Go(func() {
				for range 150 {
					d, err := l.AllowN(ctx, "shared", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		if st := l.Stats(); st.Failures != 0 {
			t.Errorf("failures: %+v", st)
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != limit {
		t.Fatalf("admitted %d across 4 limiters, want exactly %d", got, limit)
	}
}

// Each decision, with the Redis time the script used, matches the engine
// driven with AllowAt at that time: Allowed, Remaining and RetryAfter.
func TestMatchesReference(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, tc := range []struct {
		alg engine.Algorithm
		n   int
	}{{engine.SlidingWindow, 4}, {engine.SlidingWindowStrict, 4}, {engine.FixedWindow, 0}, {engine.SlidingWindow, 1}, {engine.SlidingWindowStrict, 2}} {
		alg := tc.alg
		t.Run(fmt.Sprintf("%v/N=%d", alg, tc.n), func(t *testing.T) {
			t.Parallel()
			cfg := engine.Config{Limit: 12, Window: 60 * time.Millisecond * time.Duration(tc.n), SubWindows: tc.n, Algorithm: alg}
			if alg == engine.FixedWindow {
				cfg.Window = 80 * time.Millisecond
			}
			l := mustNew(t, c, cfg, WithPrefix(fmt.Sprintf("ref:%v:%d:", alg, tc.n)))
			rc := cfg
			rc.DisableEviction = true
			ref, err := engine.New(rc)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			rng := rand.New(rand.NewPCG(uint64(alg), uint64(tc.n)))
			keys := []string{"a", "b{c}"}
			denied, admitted := 0, 0
			for i := range 400 {
				key := keys[rng.IntN(len(keys))]
				n := int64(rng.IntN(5))
				switch rng.IntN(20) {
				case 0:
					n = -1
				case 1:
					n = cfg.Limit + 1
				case 2:
					n = cfg.Limit
				}
				got, at, err := l.eval(ctx, key, n, 0)
				if err != nil {
					t.Fatal(err)
				}
				want := ref.AllowAt(key, n, at)
				if got != want {
					t.Fatalf("step %d: key %q n %d at %v: redis %+v, engine %+v", i, key, n, at.Format(time.RFC3339Nano), got, want)
				}
				if got.Allowed && n > 0 {
					admitted++
				} else if !got.Allowed {
					denied++
				}
				switch {
				case rng.IntN(60) == 0:
					// Idle for longer than the window: the state's ring
					// moves by more than N+1 sub-windows at once.
					time.Sleep(cfg.Window + 2*cfg.Window/time.Duration(max(1, tc.n)))
				case rng.IntN(3) == 0:
					time.Sleep(time.Duration(rng.IntN(15000)) * time.Microsecond)
				}
			}
			if admitted == 0 || denied == 0 {
				t.Fatalf("the script did not exercise both outcomes: %d admitted, %d denied", admitted, denied)
			}
			storedUnits(t, c, l, keys...) // the packed state decodes, and its header agrees with its tail
		})
	}
}

// The server killed mid-run: each policy decides while it is down, and
// each of its answers comes with an error wrapping ErrUnavailable; every
// failure is counted and reported once; restarted on the same port, each
// limiter answers from Redis again (through NOSCRIPT: the new server has no
// script). The breaker is off, so that every decision tries Redis (the
// breaker's own tests are in outage_test.go).
func TestServerKilled(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Limit: 10, Window: time.Minute}
	var hookCalls atomic.Int64
	hook, off := WithOnError(func(error) { hookCalls.Add(1) }), WithBreaker(0, 0)
	closed := mustNew(t, client(t, s), cfg, hook, off)
	open := mustNew(t, client(t, s), cfg, hook, off, WithPolicy(FailOpen))
	local := mustNew(t, client(t, s), cfg, hook, off, WithFallbackLocal(0.5))
	for _, l := range []*Limiter{closed, open, local} {
		if ok, err := l.Allow(ctx, "k"); !ok || err != nil {
			t.Fatalf("before the kill: %v %v", ok, err)
		}
	}
	s.Kill()

	d, err := closed.AllowN(ctx, "k", 1)
	if !errors.Is(err, ErrUnavailable) || d.Allowed || d.Reason() != engine.ReasonLimited || d.RetryAfter != 6*time.Second {
		t.Fatalf("FailClosed while down: %+v %v", d, err)
	}
	d, err = open.AllowN(ctx, "k", 1)
	if !errors.Is(err, ErrUnavailable) || !d.Allowed {
		t.Fatalf("FailOpen while down: %+v %v", d, err)
	}
	n := 0
	for range 10 {
		d, err := local.AllowN(ctx, "k", 1)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("FallbackLocal while down: %+v %v", d, err)
		}
		if d.Allowed {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("FallbackLocal(0.5) of 10 admitted %d while down, want 5", n)
	}
	if st := local.Stats(); st.Failures != 10 || st.FallbackDecisions != 10 || st.RedisDecisions != 1 {
		t.Fatalf("FallbackLocal stats %+v", st)
	}
	if got := hookCalls.Load(); got != 12 {
		t.Fatalf("OnError called %d times, want 12", got)
	}
	// A context already done asks nothing and returns its own error, even
	// when its deadline has passed and its timer has not fired yet.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []context.Context{cctx, staleDeadline{ctx}} {
		d, err := closed.AllowN(c, "k", 1)
		if err == nil || errors.Is(err, ErrUnavailable) || d.Allowed {
			t.Fatalf("done context: %+v %v", d, err)
		}
	}
	if st := closed.Stats(); st.Failures != 1 || st.FallbackDecisions != 1 {
		t.Fatalf("a done context was counted: %+v", st)
	}

	s.Start()
	for _, l := range []*Limiter{closed, open, local} {
		before := l.Stats()
		// The pool's connections died with the server: each call finds
		// at most one of them dead (MaxRetries -1), then dials anew.
		var err error
		for range 20 {
			if _, err = l.Allow(ctx, "k"); err == nil {
				break
			}
		}
		if st := l.Stats(); st.RedisDecisions != before.RedisDecisions+1 || err != nil {
			t.Fatalf("no recovery after restart: %+v (%v)", st, err)
		}
	}
}

// A deadline that passes during the call: nothing is admitted, even under
// FailOpen (the caller left; the policy answers for Redis, not for it),
// and the error wraps the context's error, not ErrUnavailable. The proxy
// holds every reply for 300 ms; the client honours context deadlines.
func TestDeadlineDuringCall(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute}, WithPolicy(FailOpen))
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(300 * time.Millisecond))
	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	d, err := l.AllowN(dctx, "k", 1)
	if d.Allowed || errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%+v %v", d, err)
	}
	if st := l.Stats(); st.CallerGone != 1 || st.Failures != 0 || st.FallbackDecisions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestScriptFlush(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 3, Window: time.Minute})
	for i := range 5 {
		if i == 2 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil || d.Allowed != (i < 3) {
			t.Fatalf("step %d: %+v %v", i, d, err)
		}
	}
	if st := l.Stats(); st.NoScript != 2 || st.Failures != 0 || st.RedisDecisions != 5 {
		t.Fatalf("stats %+v, want two NOSCRIPTs (the first call, and after the flush) and no failure", st)
	}
}

func TestBraces(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	cfg := engine.Config{Limit: 2, Window: time.Minute, SubWindows: 6}
	l := mustNew(t, c, cfg)
	keys := []string{"a{b}c", "{a}", "a", "{a", "a}", `\(a\)`, "(a)", "}{", "", `\`, `\\`}
	seen := map[string]string{}
	for _, k := range keys {
		rk := l.Key(k)
		if o, dup := seen[rk]; dup {
			t.Fatalf("keys %q and %q share the Redis key %q", o, k, rk)
		}
		seen[rk] = k
		// The tag is everything between the first '{' and the next '}',
		// and only the geometry follows it.
		i := strings.IndexByte(rk, '{')
		j := strings.IndexByte(rk[i+1:], '}')
		if i+1+j != len(rk)-1-len(":w10000000n6") || !strings.HasSuffix(rk, "}:w10000000n6") {
			t.Fatalf("key %q: Redis key %q: the hash tag does not end just before the geometry", k, rk)
		}
	}
	for _, k := range keys {
		for i := range 3 {
			d, err := l.AllowN(ctx, k, 1)
			if err != nil || d.Allowed != (i < 2) {
				t.Fatalf("key %q step %d: %+v %v (keys must not share counts)", k, i, d, err)
			}
		}
		ttl, err := c.PTTL(ctx, l.Key(k)).Result()
		if err != nil || ttl <= 0 || ttl > cfg.Window+cfg.Window/6 {
			t.Fatalf("key %q: PTTL %v %v", k, ttl, err)
		}
	}
}

func TestCluster(t *testing.T) {
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
