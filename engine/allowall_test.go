package engine_test

import (
	"fmt"
	"math/rand"
	"runtime/debug"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// allStep is one AllowAll of one unit of "t" on each of perSec and perHour
// at t0+at, and what it must return; then each engine's Remaining.
type allStep struct {
	at              time.Duration
	index           int
	allowed         bool
	remaining       int64 // of the returned Decision
	remSec, remHour int64
}

// 3 per second and 5 per hour: the recipe "N per second and M per hour".
func TestAllowAllSteps(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			perSec := newEngine(t, engine.Config{Limit: 3, Window: time.Second, SubWindows: 1, Algorithm: alg, DisableEviction: true})
			perHour := newEngine(t, engine.Config{Limit: 5, Window: time.Hour, SubWindows: 60, Algorithm: alg, DisableEviction: true})
			reqs := []engine.Request{{Engine: perSec, Key: "t", N: 1}, {Engine: perHour, Key: "t", N: 1}}
			steps := []allStep{
				{0, -1, true, 2, 2, 4}, // the least Remaining: perSec's 2
				{0, -1, true, 1, 1, 3},
				{0, -1, true, 0, 0, 2},
				{0, 0, false, 0, 0, 2},         // perSec refuses; perHour is not asked
				{2000 * ms, -1, true, 1, 2, 1}, // perHour's 1 is the least
				{2000 * ms, -1, true, 0, 1, 0},
				{2000 * ms, 1, false, 0, 1, 0}, // perHour refuses: perSec's unit goes back
				{4000 * ms, 1, false, 0, 3, 0},
			}
			for i, s := range steps {
				now := t0.Add(s.at)
				idx, d := engine.AllowAll(now, reqs...)
				require.Equal(t, s.index, idx, "step %d: %+v", i, d)
				require.Equal(t, s.allowed, d.Allowed, "step %d: %+v", i, d)
				require.Equal(t, s.remaining, d.Remaining, "step %d: %+v", i, d)
				require.Equal(t, s.remSec, perSec.AllowAt("t", 0, now).Remaining, "step %d: per second", i)
				require.Equal(t, s.remHour, perHour.AllowAt("t", 0, now).Remaining, "step %d: per hour", i)
			}
		})
	}
}

func TestAllowAllEdges(t *testing.T) {
	a := newEngine(t, engine.Config{Limit: 3, Window: time.Second, DisableEviction: true})
	b := newEngine(t, engine.Config{Limit: 3, Window: time.Second, Algorithm: engine.SlidingLog, DisableEviction: true})

	idx, d := engine.AllowAll(t0)
	require.Equal(t, -1, idx)
	require.True(t, d.Allowed)

	// One key twice: the second part is refused, the first returned.
	idx, d = engine.AllowAll(t0, engine.Request{Engine: a, Key: "k", N: 2}, engine.Request{Engine: a, Key: "k", N: 2})
	require.Equal(t, 1, idx)
	require.Equal(t, engine.ReasonLimited, d.Reason())
	require.Equal(t, int64(3), a.AllowAt("k", 0, t0).Remaining)

	// A nil engine and a bad n refuse, with Never, after the earlier parts
	// were reserved; they are returned.
	for _, bad := range []engine.Request{{Engine: nil, Key: "k", N: 1}, {Engine: b, Key: "k", N: -1}, {Engine: b, Key: "k", N: 4}} {
		idx, d = engine.AllowAll(t0, engine.Request{Engine: a, Key: "k", N: 1}, engine.Request{Engine: b, Key: "k", N: 2}, bad)
		require.Equal(t, 2, idx)
		require.Equal(t, engine.Never, d.RetryAfter)
		require.Equal(t, int64(3), a.AllowAt("k", 0, t0).Remaining)
		require.Equal(t, int64(3), b.AllowAt("k", 0, t0).Remaining)
	}
	// A refused time refuses the first part, and records nothing.
	idx, d = engine.AllowAll(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), engine.Request{Engine: a, Key: "k", N: 1})
	require.Equal(t, 0, idx)
	require.Equal(t, engine.ReasonNever, d.Reason())
	// n = 0 parts are peeks: admitted, recording nothing.
	idx, d = engine.AllowAll(t0, engine.Request{Engine: a, Key: "k", N: 0}, engine.Request{Engine: b, Key: "k", N: 3})
	require.Equal(t, -1, idx)
	require.Equal(t, int64(0), d.Remaining)
	require.Equal(t, int64(3), a.AllowAt("k", 0, t0).Remaining)
}

func TestAllowAllEmptyNilAndMixedEngines(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 3, Window: time.Second, DisableEviction: true})
	f := newEngineNoCloseCheck(t, engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingLog, DisableEviction: true})
	// none
	i, d := engine.AllowAll(t0)
	if i != -1 || !d.Allowed || d != (engine.Decision{Allowed: true}) {
		t.Fatalf("empty: %d %+v", i, d)
	}
	// nil engine
	i, d = engine.AllowAll(t0, engine.Request{Engine: e, Key: "k", N: 1}, engine.Request{Key: "k", N: 1})
	if i != 1 || d.Allowed || d.RetryAfter != engine.Never {
		t.Fatalf("nil engine: %d %+v", i, d)
	}
	if r := e.AllowAt("k", 0, t0).Remaining; r != 3 {
		t.Fatalf("nil engine consumed: %d", r)
	}
	// duplicates: 2+2 > 3 on the same key -> none
	i, d = engine.AllowAll(t0, engine.Request{Engine: e, Key: "k", N: 2}, engine.Request{Engine: f, Key: "k", N: 5}, engine.Request{Engine: e, Key: "k", N: 2})
	if i != 2 || d.Allowed || d.Reason() != engine.ReasonLimited {
		t.Fatalf("dup: %d %+v", i, d)
	}
	if r := e.AllowAt("k", 0, t0).Remaining; r != 3 {
		t.Fatalf("dup consumed e: %d", r)
	}
	if r := f.AllowAt("k", 0, t0).Remaining; r != 5 {
		t.Fatalf("dup consumed f: %d", r)
	}
	// n=0 and a single request
	i, d = engine.AllowAll(t0, engine.Request{Engine: e, Key: "k", N: 0})
	if i != -1 || !d.Allowed || d.Remaining != 3 {
		t.Fatalf("n=0: %d %+v", i, d)
	}
	// least remaining, first of equals
	i, d = engine.AllowAll(t0, engine.Request{Engine: f, Key: "z", N: 4}, engine.Request{Engine: e, Key: "z", N: 2})
	if i != -1 || !d.Allowed || d.Remaining != 1 || d.Limit != 5 {
		t.Fatalf("least: %d %+v", i, d)
	}
	// before 1970
	i, d = engine.AllowAll(time.Unix(-5, 0), engine.Request{Engine: e, Key: "q", N: 1})
	if i != 0 || d.RetryAfter != engine.Never {
		t.Fatalf("1969: %d %+v", i, d)
	}
	// n too large at the end -> earlier cancelled
	i, d = engine.AllowAll(t0, engine.Request{Engine: e, Key: "y", N: 3}, engine.Request{Engine: e, Key: "y", N: -1})
	if i != 1 || d.RetryAfter != engine.Never {
		t.Fatalf("neg: %d %+v", i, d)
	}
	if r := e.AllowAt("y", 0, t0).Remaining; r != 3 {
		t.Fatalf("neg consumed: %d", r)
	}
}

func TestAllowAllFirstOfEquals(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 5, Window: time.Second, DisableEviction: true})
	f := newEngineNoCloseCheck(t, engine.Config{Limit: 7, Window: time.Second, Algorithm: engine.SlidingLog, DisableEviction: true})
	i, d := engine.AllowAll(t0, engine.Request{Engine: f, Key: "a", N: 4}, engine.Request{Engine: e, Key: "a", N: 2})
	if i != -1 || d.Limit != 7 || d.Remaining != 3 {
		t.Fatalf("first of equals: %d %+v", i, d)
	}
	i, d = engine.AllowAll(t0, engine.Request{Engine: e, Key: "b", N: 1}, engine.Request{Engine: nil, Key: "b", N: 0})
	if i != 1 || d.Reason() != engine.ReasonNever {
		t.Fatalf("nil engine n=0: %d %+v %v", i, d, d.Reason())
	}
}

// AllowAll used one stack frame per request (about 250 bytes): a long
// request list overflowed the goroutine stack, a fatal error no recover
// catches (5M requests once crashed it). It
// now keeps 8 reservations on its stack and the rest in one slice. The
// stack is capped at 16 MB here, which the old code passed at about 64,000
// requests; a fatal overflow would fail the whole test binary.
func TestAllowAllManyRequests(t *testing.T) {
	old := debug.SetMaxStack(16 << 20)
	defer debug.SetMaxStack(old)
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 300_000, Window: time.Second, DisableEviction: true})
	reqs := make([]engine.Request, 200_000)
	for i := range reqs {
		reqs[i] = engine.Request{Engine: e, Key: "k", N: 1}
	}
	if i, d := engine.AllowAll(t0, reqs...); i != -1 || !d.Allowed || d.Remaining != 100_000 {
		t.Fatalf("200,000 requests of 1 unit on a limit of 300,000: %d %+v", i, d)
	}
	// One more than fits: the last is refused and all 200,001 are given
	// back, on the heap slice.
	reqs = append(reqs, engine.Request{Engine: e, Key: "k", N: 100_001})
	e2 := newEngineNoCloseCheck(t, engine.Config{Limit: 300_000, Window: time.Second, DisableEviction: true})
	for i := range reqs {
		reqs[i].Engine = e2
	}
	if i, d := engine.AllowAll(t0, reqs...); i != len(reqs)-1 || d.Allowed {
		t.Fatalf("the last request must refuse: %d %+v", i, d)
	}
	if rem := e2.AllowAt("k", 0, t0).Remaining; rem != 300_000 {
		t.Fatalf("after a refused AllowAll of 200,001 requests %d units stay consumed", 300_000-rem)
	}
}

// AllowAll against its documented definition, executed by hand on a twin
// set of engines: ReserveAt each request in order, on the first denial
// cancel the earlier ones newest first. The outcomes, every key's
// Remaining afterwards, and the audit reports must be identical, for
// request counts around the stack/heap boundary and far beyond it.
func TestAllowAllMatchesTwinEngine(t *testing.T) {
	sizes := []int{0, 1, 2, 7, 8, 9, 10, 16, 17, 100, 1000}
	for seed := int64(1); seed <= scaled[int64](6, 30); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			mk := func() []*engine.Engine {
				var es []*engine.Engine
				for i, alg := range allAlgorithms {
					sub := []int{1, 3, 4, 10}[i]
					es = append(es, newEngineNoCloseCheck(t, engine.Config{Limit: int64(5 + i*7), Window: time.Duration(600+100*i) * time.Millisecond / time.Duration(sub) * time.Duration(sub), SubWindows: sub,
						Algorithm: alg, DisableEviction: true, Audit: 1, PerKeyLimits: true}))
				}
				return es
			}
			A, B := mk(), mk()
			keys := []string{"a", "b", "c", "d"}
			now := t0
			for step := 0; step < 150; step++ {
				now = now.Add(time.Duration(rng.Int63n(int64(150 * time.Millisecond))))
				if rng.Intn(10) == 0 {
					now = now.Add(-time.Duration(rng.Int63n(int64(300 * time.Millisecond))))
				}
				size := sizes[rng.Intn(len(sizes))]
				type rq struct {
					e   int
					key string
					n   int64
				}
				var rs []rq
				for i := 0; i < size; i++ {
					n := int64(rng.Intn(3))
					if size > 20 {
						n = int64(rng.Intn(2))
						if rng.Intn(size) == 0 {
							n = 2
						}
					}
					rs = append(rs, rq{rng.Intn(len(A)), keys[rng.Intn(len(keys))], n})
				}
				if rng.Intn(8) == 0 && size > 0 {
					rs[rng.Intn(size)].n = -1
				}
				ra := make([]engine.Request, size)
				for i, r := range rs {
					ra[i] = engine.Request{Engine: A[r.e], Key: r.key, N: r.n}
				}
				gi, gd := engine.AllowAll(now, ra...)
				// by hand
				res := make([]engine.Reservation, size)
				wi, wd := -1, engine.Decision{Allowed: true}
				first := true
				for i, r := range rs {
					res[i] = B[r.e].ReserveAt(r.key, r.n, now)
					d := res[i].Decision()
					if !d.Allowed {
						wi, wd = i, d
						for j := i - 1; j >= 0; j-- {
							res[j].Cancel()
						}
						break
					}
					if first || d.Remaining < wd.Remaining {
						wd, first = d, false
					}
				}
				if gi != wi || gd != wd {
					t.Fatalf("step %d size %d: AllowAll -> %d %+v, by hand %d %+v", step, size, gi, gd, wi, wd)
				}
				for i := range A {
					for _, k := range keys {
						da, db := A[i].AllowAt(k, 0, now), B[i].AllowAt(k, 0, now)
						if da != db {
							t.Fatalf("step %d: engine %d key %s: AllowAll leaves %+v, by hand %+v", step, i, k, da, db)
						}
					}
				}
				if rng.Intn(5) == 0 {
					// ordinary traffic
					i, k, n := rng.Intn(len(A)), keys[rng.Intn(len(keys))], int64(1+rng.Intn(3))
					A[i].AllowAt(k, n, now)
					B[i].AllowAt(k, n, now)
				}
			}
			for i := range A {
				ga, gb := A[i].Audit(), B[i].Audit()
				if ga != gb {
					t.Errorf("engine %d audit: AllowAll %+v\n by hand %+v", i, ga, gb)
				}
				if (i == 1 || i == 3) && ga.FalseAdmits != 0 {
					t.Errorf("engine %d (%v) false admits %+v", i, allAlgorithms[i], ga)
				}
			}
		})
	}
}

func TestAllowAllZeroFirst(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, DisableEviction: true})
		at := atMs(t0, 925)
		idx, _ := engine.AllowAll(at, engine.Request{Engine: e, Key: "a", N: 0}, engine.Request{Engine: e, Key: "a", N: 2}, engine.Request{Engine: e, Key: "a", N: 1})
		d := e.AllowAt("a", 2, atMs(at, 10))
		rep := e.Audit()
		t.Logf("%v idx=%d admit=%v %+v", alg, idx, d.Allowed, rep)
		if rep.FalseAdmits != 0 {
			t.Errorf("%v: false admit", alg)
		}
	}
}
