package redisstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

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
func TestScriptMatchesEngine(t *testing.T) {
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
			ref := engineRef(t, cfg)
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

// The script never admits a cost above the key's limit, whatever double it
// becomes. Lua's numbers are doubles, exact below 2^53: go-redis sends n as
// its decimal digits, and an n above 2^53 rounds, but never down to a
// limit (at most 2^40 − 1) or below, and a negative n stays negative, so
// every comparison the script makes with n keeps its sign; nothing wraps.
// AllowN refuses such an n before sending (TestNeverIsLocal); this drives
// the script directly, as another client might, on a key holding 5 units
// and on the same key once KeyLimit lowered its limit to 2, and at the
// largest limit each algorithm allows, where n equal to it fits an empty
// key exactly.
func TestScriptRefusesCostsAtTheInt64Edges(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	edges := []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 10, 1<<53 + 1, 1 << 53, 1<<53 - 1, 1 << 40,
		math.MinInt64, math.MinInt64 + 1, -(1 << 53) - 1, -1}
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			var limit atomic.Int64
			limit.Store(10)
			cfg := engine.Config{Limit: 10, Window: time.Hour, Algorithm: alg, KeyLimit: func(string) int64 { return limit.Load() }}
			l := mustNew(t, c, cfg, WithPrefix("edges:"+alg.String()+":"))
			if d, _, err := l.eval(ctx, "k", 5, 0); err != nil || !d.Allowed {
				t.Fatalf("5 units: %+v %v", d, err)
			}
			for _, lim := range []int64{10, 2} {
				limit.Store(lim)
				want := engine.Decision{Limit: lim, Remaining: max(0, lim-5), RetryAfter: engine.Never}
				for _, n := range append(edges, lim+1) {
					if d, _, err := l.eval(ctx, "k", n, 0); err != nil || d != want {
						t.Errorf("limit %d, n %d: %+v %v, want %+v", lim, n, d, err, want)
					}
				}
			}
			if got := storedUnits(t, c, l, "k"); got != 5 {
				t.Errorf("the key holds %d units, want the 5 admitted", got)
			}
			top := l.maxLimit
			limit.Store(top)
			for _, n := range []int64{top + 1, math.MaxInt64} {
				if d, _, err := l.eval(ctx, "top", n, 0); err != nil || d != (engine.Decision{Limit: top, Remaining: top, RetryAfter: engine.Never}) {
					t.Errorf("limit %d, n %d on an empty key: %+v %v", top, n, d, err)
				}
			}
			if d, _, err := l.eval(ctx, "top", top, 0); err != nil || d != (engine.Decision{Allowed: true, Limit: top}) {
				t.Errorf("limit %d, n = the limit on an empty key: %+v %v", top, d, err)
			}
			if d, _, err := l.eval(ctx, "top", 1, 0); err != nil || d.Allowed || d.RetryAfter == engine.Never {
				t.Errorf("limit %d, one unit more: %+v %v, want limited", top, d, err)
			}
		})
	}
}

// A SCRIPT FLUSH between a hybrid flush's load of the script (after
// NOSCRIPT) and its resend: the resend meets NOSCRIPT again, and must not
// fail the flush (a failure state, the policy answering) for a Redis that
// answers; the keys go once more as EVAL, which cannot meet it, as the
// plain mode's batches do. TestHybridScriptFlushUnderLoad met this on a
// loaded machine, its SCRIPT FLUSHes 20 ms apart.
func TestHybridScriptFlushBeforeResend(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute}, WithHybrid(5*time.Millisecond, 10), withManual())
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		for range 3 { // the first exact, then local
			if d, err := l.AllowN(ctx, k, 1); err != nil || !d.Allowed {
				t.Fatal(d, err)
			}
		}
	}
	flushes := 0
	l.hyb.afterLoad = func() {
		flushes++
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Error(err)
		}
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := l.Stats().NoScript
	l.flushNow()
	if flushes != 1 {
		t.Fatalf("the flush loaded the script %d times, want 1 (did it meet NOSCRIPT?)", flushes)
	}
	if st := l.Stats(); st.Failures != 0 || st.LostUnits != 0 || st.BreakerOpens != 0 || st.NoScript != before+2 {
		t.Fatalf("stats %+v: want no failure, and the two NOSCRIPTs counted", st)
	}
	if got := storedUnits(t, c, l, keys...); got != 9 {
		t.Fatalf("Redis holds %d units, want the 9 admitted", got)
	}
	if d, err := l.AllowN(ctx, "a", 1); err != nil || !d.Allowed {
		t.Fatalf("the next decision: %+v %v", d, err)
	}
}

// Issue 15, item 2: after SCRIPT FLUSH, a flush of 5,000 keys (20,000
// with -long) behind 1 ms of latency per reply loads the script once,
// sends those keys again as pipelines of 1,000, loses nothing, and counts
// one NOSCRIPT and no failure.
func TestHybridNoScriptManyKeys(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	p := startProxy(t, s.Addr())
	pc := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 16, ContextTimeoutEnabled: true})
	defer pc.Close()
	var hook atomic.Int64
	// The interval sets each round trip's deadline (10 × interval): 10 s,
	// a hang bound, since a loaded machine takes more than the 500 ms of a
	// shorter interval for 1,000 keys. The test runs every flush itself.
	l := mustNew(t, pc, engine.Config{Limit: 100, Window: time.Minute}, WithHybrid(time.Second, 10), withManual(), WithOnError(func(error) { hook.Add(1) }))
	keys := 5000
	if *long {
		keys = 20000
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint("k", i)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < keys; i += 8 {
				if _, err := l.AllowN(ctx, names[i], 1); err != nil { // exact
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// No flush here: it would drop the keys, decided only exactly so far
	// (issue 32: no pull for them), and the next decisions would be
	// exact again.
	for _, k := range names {
		if d, err := l.AllowN(ctx, k, 1); err != nil || !d.Allowed { // local
			t.Fatal(d, err)
		}
	}
	before := l.Stats()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(time.Millisecond))
	l.flushNow()
	st := l.Stats()
	if st.NoScript != before.NoScript+1 || st.Failures != 0 || hook.Load() != 0 || st.Flushes != before.Flushes+1 {
		t.Fatalf("stats %+v (before %+v), OnError called %d times", st, before, hook.Load())
	}
	if got := storedUnits(t, c, l, names...); got != 2*int64(keys) {
		t.Fatalf("Redis holds %d units, want %d", got, 2*keys)
	}
}

// SCRIPT FLUSH again and again under load, with the background flushers:
// nothing fails, nothing is lost or counted twice.
func TestHybridScriptFlushUnderLoad(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	var ls []*Limiter
	for range 3 {
		ls = append(ls, mustNew(t, client(t, s), engine.Config{Limit: 100_000, Window: time.Minute}, WithHybrid(2*time.Millisecond, 10)))
	}
	keys := []string{"a", "b", "c", "d", "e"}
	stop := make(chan struct{})
	admitted := hybridLoad(t, ls, keys, stop, new(atomic.Bool))
	for range 10 {
		time.Sleep(20 * time.Millisecond) // let load run between the flushes of the script cache
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	var noscript uint64
	for _, l := range ls {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		st := l.Stats()
		if st.Failures != 0 || st.LostUnits != 0 || st.FallbackDecisions != 0 {
			t.Fatalf("stats %+v", st)
		}
		noscript += st.NoScript
	}
	if noscript < 10 {
		t.Fatalf("%d NOSCRIPTs met across 10 SCRIPT FLUSHes", noscript)
	}
	if got := storedUnits(t, c, ls[0], keys...); got != admitted.Load() {
		t.Fatalf("admitted %d units, Redis holds %d", admitted.Load(), got)
	}
}
