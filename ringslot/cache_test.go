package ringslot

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/internal/pack"
)

// Tests of the settled-window cache (cache.go). Each adversarial test is a
// fixed interleaving forced through the test hooks, and each fails on a
// variant of the code without the guard it names.

// cacheWords returns the ring's cache words (full, old).
func cacheWords(g *Geometry, r Ring) (int64, int64) {
	return r.word(wordFull).Load(), r.word(wordOld).Load()
}

// An undo after a publish: U adds 2 units at x; before its final check, P
// moves the key to x+1, walks (counting U's add) and publishes full = 5.
// U then sees last moved, undoes, and retries at x+1. Without invalidate,
// the cache would keep U's undone 2 units for the rest of x+1: U's retry
// and every later decision there would count 12 where 10 is right.
func TestUndoAfterAPublishLeavesNoOverCount(t *testing.T) {
	const w = sec / 10
	g := NewGeometry(w, 10, true, false)
	r := g.New(t0, 0, "k")
	x := t0 / w
	require.True(t, g.Acquire(r, x*w, 3, 10).Allowed)
	fired := false
	g.testHookAdded = func(e int64) {
		if fired || e != x {
			return
		}
		fired = true
		p := g.Acquire(r, (x+1)*w, 1, 10) // P: 3 + U's 2 (still there) + 1
		require.True(t, p.Allowed)
		require.Equal(t, int64(4), p.Remaining)
		full, _ := cacheWords(g, r)
		require.Equal(t, pack.Word(pack.TagOf(x+1), 5), full, "P published U's add")
	}
	u := g.Acquire(r, x*w+1, 2, 10)
	require.True(t, fired)
	require.True(t, u.Allowed)
	require.Equal(t, x+1, u.Epoch, "U retried at the key's new epoch")
	require.Equal(t, int64(4), u.Remaining, "3 at x, P's 1 and U's 2 at x+1: the cache still held U's undone units")
	require.Equal(t, int64(4), g.Peek(r, (x+1)*w, 0, 10).Remaining)
	require.True(t, g.Acquire(r, (x+1)*w, 4, 10).Allowed)
	require.False(t, g.Acquire(r, (x+1)*w, 1, 10).Allowed)
}

// The other order: P walks while U's add is in, and stalls before it
// publishes; U undoes, invalidates, retries at x+1 (walking and publishing
// the right counts), and only then does P try to publish its walk. P's CAS
// is from the word it read before its walk, which the marker changed, so
// it fails; a Store would leave U's undone units in the cache.
func TestPublisherStalledAcrossAnUndoDoesNotPublish(t *testing.T) {
	const w = sec / 10
	g := NewGeometry(w, 10, true, false)
	r := g.New(t0, 0, "k")
	x := t0 / w
	require.True(t, g.Acquire(r, x*w, 3, 10).Allowed)

	added, goU := make(chan struct{}), make(chan struct{})
	walked, goP := make(chan struct{}), make(chan struct{})
	var uHooked, pHooked atomic.Bool
	g.testHookAdded = func(e int64) {
		if e == x && uHooked.CompareAndSwap(false, true) {
			close(added)
			<-goU
		}
	}
	g.testHookWalked = func(e int64) {
		if e == x+1 && pHooked.CompareAndSwap(false, true) {
			close(walked)
			<-goP
		}
	}
	uRes, pRes := make(chan Result, 1), make(chan Result, 1)
	go func() { uRes <- g.Acquire(r, x*w+1, 2, 10) }()
	<-added
	go func() { pRes <- g.Acquire(r, (x+1)*w, 1, 10) }()
	<-walked // P's walk counted U's 2 units
	close(goU)
	u := <-uRes // U undid, invalidated, walked at x+1 and published full = 3
	require.True(t, u.Allowed)
	require.Equal(t, x+1, u.Epoch)
	full, _ := cacheWords(g, r)
	require.Equal(t, pack.Word(pack.TagOf(x+1), 3), full)
	close(goP)
	p := <-pRes
	require.True(t, p.Allowed)
	full, _ = cacheWords(g, r)
	require.Equal(t, pack.Word(pack.TagOf(x+1), 3), full, "P's stale walk replaced the cache")
	// 3 at x, U's 2 and P's 1 at x+1: 4 more fit.
	require.Equal(t, int64(4), g.Peek(r, (x+1)*w, 0, 10).Remaining)
	require.True(t, g.Acquire(r, (x+1)*w, 4, 10).Allowed, "a false denial from the stale publish")
	require.False(t, g.Acquire(r, (x+1)*w, 1, 10).Allowed)
}

// A writer walks at e (nothing counted), stalls before it publishes, and
// others move the key 2^24 sub-windows on, to e' with e's tag, where they
// fill the window and publish full = 10 for e'. If the stalled writer's
// publish landed, (tag of e, 0) would read as e' with nothing counted, and
// the next request at e' would be admitted over a full window. Its CAS is
// from the word it read before its walk, so it fails.
func TestStalledPublisherCannotAliasANewerEpoch(t *testing.T) {
	const w = sec / 1000
	for _, weighted := range []bool{true, false} {
		g := NewGeometry(w, 10, weighted, false)
		r := g.New(t0, 0, "k")
		e := t0/w + 1
		target := e + 1<<pack.TagBits // the same tag as e
		require.Equal(t, pack.TagOf(e), pack.TagOf(target))
		stalled := true
		g.testHookWalked = func(at int64) {
			if !stalled || at != e {
				return
			}
			stalled = false
			for x := e; x < target-1; {
				x = min(x+reviveGap-1, target-1)
				res := g.Acquire(r, x*w, 1, 10)
				require.True(t, res.Allowed, "step to e+%d: %+v", x-e, res)
			}
			// Fill the window at target−1; at target those units (the
			// last two steps' and these) count in full.
			room := g.Peek(r, (target-1)*w, 0, 10).Remaining
			require.True(t, g.Acquire(r, (target-1)*w, room, 10).Allowed)
			require.False(t, g.Acquire(r, target*w, 1, 10).Allowed) // walks and publishes full = 10
			full, _ := cacheWords(g, r)
			require.Equal(t, pack.Word(pack.TagOf(target), 10), full)
		}
		res := g.Acquire(r, e*w, 1, 10) // the first writer at e: publishes e, walks
		require.False(t, stalled, "the hook ran")
		require.False(t, res.Allowed, "the stalled writer was admitted over a full window: %+v", res)
		require.Equal(t, target, res.Epoch)
		full, _ := cacheWords(g, r)
		require.Equal(t, pack.Word(pack.TagOf(target), 10), full, "weighted=%v: the stalled walk was published", weighted)
		require.False(t, g.Acquire(r, target*w, 1, 10).Allowed, "weighted=%v: over-admission at the aliased epoch", weighted)
	}
}

// SetLimit lowers a key's limit while its settled counts are cached: the
// cache holds counts, not room, so the next decision uses the new limit.
func TestSetLimitLowerWhileCached(t *testing.T) {
	const w = sec / 10
	g := NewGeometry(w, 10, true, true)
	r := g.New(t0, 10, "k")
	x := t0 / w
	require.True(t, g.Acquire(r, x*w, 8, g.Limit(r)).Allowed)
	require.True(t, g.Acquire(r, (x+1)*w, 1, g.Limit(r)).Allowed) // walks, caches full = 8
	full, _ := cacheWords(g, r)
	require.Equal(t, pack.Word(pack.TagOf(x+1), 8), full)
	require.True(t, g.SetLimit(r, 5))
	res := g.Acquire(r, (x+1)*w+1, 1, g.Limit(r))
	require.False(t, res.Allowed, "9 counted against a limit of 5")
	require.Zero(t, res.Remaining)
	// At x+10, x's 8 units weigh (w−r)/w beside x+1's one: room for one
	// more needs 8·(w−r)/w ≤ 3, r ≥ 5w/8.
	require.Equal(t, 9*w+5*w/8-1, res.RetryAfter)
	// Once x's units have left, 4 more fit beside x+1's one.
	at := (x + 11) * w
	require.Equal(t, int64(4), g.Peek(r, at, 0, 5).Remaining)
	require.True(t, g.Acquire(r, at, 4, g.Limit(r)).Allowed)
	require.False(t, g.Acquire(r, at, 1, g.Limit(r)).Allowed)
}

// settle marks a cache word whose epoch lags by staleAfter or more, and
// leaves a recent one alone; a marker bounds every count.
func TestSettleMarksAStaleCache(t *testing.T) {
	const w = sec / 10
	g := NewGeometry(w, 10, true, false)
	r := g.New(t0, 0, "k")
	e := t0/w + staleAfter
	recent := pack.Word(pack.TagOf(e-staleAfter+1), 7)
	r.word(wordFull).Store(pack.Word(pack.TagOf(e-staleAfter), 7))
	r.word(wordOld).Store(recent)
	g.settle(r, e)
	full, old := cacheWords(g, r)
	require.Equal(t, marker(pack.TagOf(e-1)), full, "a stale cache word must be marked")
	require.Equal(t, recent, old, "a recent one is kept")
	require.Equal(t, int64(pack.MaxCount), pack.CountOfWord(full))
}

// invalidate always changes a word it may have to remove, even one that is
// already marker(x): a publisher that read marker(x) before its walk must
// then fail its CAS.
func TestInvalidateAlwaysChangesTheWord(t *testing.T) {
	g := NewGeometry(sec/10, 10, true, false)
	r := g.New(t0, 0, "k")
	x := pack.TagOf(t0/(sec/10) + 3)
	for _, before := range []int64{pack.Word(x+1, 5), marker(x), pack.Word(x, 2), pack.Word(x-100, 2)} {
		r.word(wordFull).Store(before)
		r.word(wordOld).Store(before)
		g.invalidate(r, x)
		full, old := cacheWords(g, r)
		require.NotEqual(t, before, full)
		require.NotEqual(t, before, old)
		require.Equal(t, int64(pack.MaxCount), pack.CountOfWord(full))
	}
	// A word for an epoch past x+N has not read x: left alone.
	far := pack.Word(x+11, 5)
	r.word(wordFull).Store(far)
	g.invalidate(r, x)
	full, _ := cacheWords(g, r)
	require.Equal(t, far, full)
}

// In a sequential run the cache holds exact counts: every Acquire decides
// as a walk of the slots does. Peek walks; Acquire reads the cache except
// on the first decision of a sub-window. Random times, mostly forward, some
// backward (clamped), some jumps, for every geometry.
func TestCacheAgreesWithAWalkSequentially(t *testing.T) {
	for _, tc := range []struct {
		name     string
		span     int
		weighted bool
	}{{"sliding-10", 10, true}, {"sliding-1", 1, true}, {"sliding-3", 3, true}, {"strict-10", 10, false}, {"strict-1", 1, false}, {"fixed", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= scaled[uint64](5, 20); seed++ {
				rng := rand.New(rand.NewPCG(seed, 7))
				w := int64(1000)
				if tc.span == 0 {
					w = 10_000
				}
				g := NewGeometry(w, tc.span, tc.weighted, false)
				limit := 1 + rng.Int64N(30)
				now := t0
				r := g.New(now, 0, "k")
				for i := 0; i < 3000; i++ {
					switch k := rng.IntN(100); {
					case k < 70:
						now += rng.Int64N(w / 3)
					case k < 80:
						now -= rng.Int64N(2 * w) // clamped to the key's newest sub-window
					case k < 85:
						now += rng.Int64N(int64(tc.span+3) * w)
					}
					n := 1 + rng.Int64N(limit)
					p := g.Peek(r, now, n, limit)
					a := g.Acquire(r, now, n, limit)
					require.Equal(t, p.Allowed, a.Allowed, "op %d at %d: peek %+v, acquire %+v", i, now, p, a)
					require.Equal(t, p.Epoch, a.Epoch)
					if a.Allowed {
						require.Equal(t, p.Remaining-n, a.Remaining, "op %d", i)
						require.Equal(t, a.Remaining, g.Peek(r, now, 0, limit).Remaining)
					} else {
						require.Equal(t, p.Remaining, a.Remaining, "op %d", i)
						require.Equal(t, p.RetryAfter, a.RetryAfter, "op %d", i)
					}
				}
			}
		})
	}
}

// Writers race across many sub-window boundaries on one key, each with a
// clock of its own that moves forward by jittered steps and sometimes lags
// (stale writers at a boundary are what undo, and what a publisher may
// count). Every admission is recorded at its effective epoch, and then
// every run of epochs that the estimate counts in full must hold at most
// the limit: N consecutive epochs for the weighted window, N+1 for Strict,
// one for Fixed (docs/design.md §1).
func TestCacheBoundaryRacesNeverOverAdmit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		span     int
		weighted bool
	}{{"sliding", 4, true}, {"strict", 4, false}, {"fixed", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				w       = 2000
				limit   = 6
				workers = 8
				ops     = 4000
			)
			g := NewGeometry(w, tc.span, tc.weighted, false)
			r := g.New(t0, 0, "k")
			var shared atomic.Int64 // a clock the workers push forward
			shared.Store(t0)
			type rec struct{ e, n int64 }
			recs := make([][]rec, workers)
			var wg sync.WaitGroup
			for wk := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(wk), 99))
					for range ops {
						now := shared.Add(rng.Int64N(w / 8))
						if rng.IntN(4) == 0 {
							now -= rng.Int64N(w) // a writer that read the clock a while ago
						}
						n := 1 + rng.Int64N(2)
						if res := g.Acquire(r, now, n, limit); res.Allowed {
							recs[wk] = append(recs[wk], rec{res.Epoch, n})
						}
					}
				}()
			}
			wg.Wait()
			per := map[int64]int64{}
			lo, hi := int64(1<<62), int64(0)
			total := int64(0)
			for _, rs := range recs {
				for _, x := range rs {
					per[x.e] += x.n
					lo, hi = min(lo, x.e), max(hi, x.e)
					total += x.n
				}
			}
			run := int64(max(tc.span, 1)) // epochs the estimate counts in full
			if !tc.weighted && tc.span > 0 {
				run = int64(tc.span) + 1
			}
			for e := lo; e <= hi; e++ {
				sum := int64(0)
				for k := int64(0); k < run; k++ {
					sum += per[e+k]
				}
				require.LessOrEqual(t, sum, int64(limit), "epochs %d … %d", e, e+run-1)
			}
			require.Greater(t, total, int64(limit), "the test must admit across several windows")
		})
	}
}
