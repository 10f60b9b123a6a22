package engine_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewKeyBehindTheClockStartsAtItsShardsFloor pins what the docs now
// say about the reclamation floor, which is per shard: a brand-new key
// decided by AllowAt more than a sub-window behind the engine's clock, in
// a shard that reclaimed another key, is decided at that key's
// retirement time (the shard's floor, never past the clock minus one
// sub-window): it gets Limit units there, and its RetryAfter counts from
// the caller's own now to the end of the floor's window. A request at the
// engine's clock is never clamped, and with eviction off there is no
// floor.
func TestNewKeyBehindTheClockStartsAtItsShardsFloor(t *testing.T) {
	const (
		W = time.Second
		w = W / 10
		L = 2
	)
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: L, Window: W, SubWindows: 10, Clock: clk, Shards: 1, SweepInterval: time.Hour})
	if !e.Allow("a") { // "a" at t0; idle from then on
		t.Fatal("a refused")
	}
	clk.Advance(41 * time.Second)
	if n := e.Sweep(); n != 1 {
		t.Fatalf("Sweep reclaimed %d keys, want 1", n)
	}
	floor := t0.Add(W + w) // a's retirement time: its newest sub-window's end plus W
	// A brand-new key, 40 s behind the clock (39.9 s behind the floor).
	at := t0.Add(time.Second)
	for i := range L {
		d, eff := e.AllowAtTrace("b", 1, at)
		if !d.Allowed || eff != floor.UnixNano()/int64(w) {
			t.Fatalf("unit %d: %+v at epoch %d, want admitted at the floor's epoch %d", i, d, eff, floor.UnixNano()/int64(w))
		}
	}
	// Room for one more once the floor's sub-window is half out of the
	// weighted window (2·(w−r)/w + 1 ≤ 2), counted from the caller's now.
	room := floor.Add(W + w/2)
	d := e.AllowAt("b", 1, at)
	if want := room.Sub(at); d.Allowed || d.RetryAfter != want {
		t.Fatalf("third unit: %+v, want refused with RetryAfter %v (from the caller's now to the room at the floor's timeline)", d, want)
	}
	if d := e.AllowAt("b", 1, room); !d.Allowed {
		t.Fatalf("at its RetryAfter: %+v, want admitted", d)
	}
	// At the engine's clock a new key is never clamped: the floor is at
	// least a sub-window behind it.
	now := time.Unix(0, clk.UnixNano())
	if _, eff := e.AllowAtTrace("c", 1, now); eff != now.UnixNano()/int64(w) {
		t.Fatalf("a new key at the clock was clamped to epoch %d, want %d", eff, now.UnixNano()/int64(w))
	}
}

// Regression: The design says "the floor never passes the engine's clock, so a
// writer on the engine's clock is clamped forward by at most its own delay".
// But a KeyLimit refusal after a revive (engine.replace → Table.Remove)
// raises the shard's floor to the reviving writer's own time, which is the
// caller's AllowAt time: any time up to 2262. Every key the shard creates
// afterwards — other tenants' keys on the engine's clock — starts there:
// all their requests clamp to that one far sub-window, so each gets Limit
// units in total until the clock reaches it, and the sweeper never finds
// them idle (their newest epoch is ahead of its clock), so they are never
// reclaimed.
//
// The key the refusal hits exists legitimately: SetLimit creates a key
// without consulting KeyLimit (here: an operator grants "vip" a limit,
// although KeyLimit refuses unknown tenants); a KeyLimit that flips (a
// tenant removed from the policy) does the same.
func TestRefusedReviveKeepsShardFloorAtClock(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0)
			clk := engine.NewManualClock(t0)
			const L = 3
			e := newEngine(t, engine.Config{
				Limit: L, Window: time.Second, SubWindows: 10, Algorithm: alg, Clock: clk,
				Shards: 1, SweepInterval: time.Hour,
				KeyLimit: func(k string) int64 {
					if k == "vip" {
						return -1 // not in the policy
					}
					return 0
				},
			})
			require.NoError(t, e.SetLimit("vip", 10)) // an operator's override
			w := time.Second / 10
			if alg == engine.FixedWindow {
				w = time.Second
			}
			// One request with a far time (a client-supplied timestamp, a
			// replay): ≥ 2^21 sub-windows past the key's newest.
			far := t0.Add(w * (1 << 24))
			d := e.AllowAt("vip", 1, far)
			require.Equal(t, engine.Never, d.RetryAfter)

			// Another tenant, on the engine's own clock, in the same shard.
			d, eff := e.AllowAtTrace("other", 1, time.Unix(0, clk.UnixNano()))
			require.True(t, d.Allowed)
			clockEpoch := time.Unix(0, clk.UnixNano()).UnixNano() / int64(w)
			assert.LessOrEqual(t, eff, clockEpoch+1,
				"a new key on the engine's clock starts %d sub-windows in the future (floor beyond the clock)", eff-clockEpoch)
			for i := 1; i < L; i++ {
				require.True(t, e.Allow("other"))
			}
			// Three windows later the tenant must have a fresh window.
			clk.Advance(3 * time.Second)
			d = e.AllowN("other", 1)
			assert.True(t, d.Allowed, "3 windows after its last request, \"other\" is still refused: %+v (%v)", d, d.Reason())
			// And once idle for an hour it must be reclaimed.
			clk.Advance(time.Hour)
			assert.Equal(t, 1, e.Sweep(), "an hour-idle key is not reclaimed")
		})
	}
}

// The same mechanism on the sweeper side: a sweep at the
// engine's clock only lifts the floor to that clock.
func TestSweepFloorStaysAtClock(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 3, Window: time.Second, SubWindows: 10, Clock: clk, Shards: 1, SweepInterval: time.Hour})
	require.True(t, e.Allow("a"))
	clk.Advance(2 * time.Second)
	require.Equal(t, 1, e.Sweep())
	_, eff := e.AllowAtTrace("b", 1, time.Unix(0, clk.UnixNano()))
	require.Equal(t, time.Unix(0, clk.UnixNano()).UnixNano()/int64(100*time.Millisecond), eff)
}

var _ = atomic.Int64{}

// Regression: A replay on a past timeline with DisableEviction (as Config
// documents for "a timeline unrelated to Clock"), calling Sweep to get
// memory back ("Sweep is for … engines with DisableEviction"): the sweep
// judges idleness by the Clock (documented), but it also lifts the shard's
// floor to the Clock's now, and from then on every key the shard creates —
// by AllowAt or by SetLimitAt at a replay time — starts at the Clock's
// now, years ahead of the replay. Every later replay request of that key is
// clamped to one sub-window: each key gets Limit units for the rest of the
// replay. Nothing documents that a Sweep freezes new keys of the timeline.
func TestSweepOnReplayTimelineLeavesNewKeysOnIt(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(1_800_000_000, 0)) // "real" now
	const L = 2
	e := newEngine(t, engine.Config{Limit: L, Window: time.Second, SubWindows: 10, Clock: clk, DisableEviction: true, Shards: 1, PerKeyLimits: true})
	replay := time.Unix(1_600_000_000, 0)
	require.True(t, e.AllowAt("old", 1, replay).Allowed)
	require.Equal(t, 1, e.Sweep()) // memory back: "old" is idle by the Clock (documented)

	// The replay goes on, 10 s later, with a new key.
	at := replay.Add(10 * time.Second)
	admitted := 0
	for i := 0; i < 100; i++ { // 100 requests, 1 s apart: 100 windows
		if e.AllowAt("new", 1, at.Add(time.Duration(i)*time.Second)).Allowed {
			admitted++
		}
	}
	require.NoError(t, e.SetLimitAt("new2", 5, at))
	_, eff := e.AllowAtTrace("new2", 1, at)
	assert.Equal(t, at.UnixNano()/int64(100*time.Millisecond), eff, "SetLimitAt at a replay time created the key at the Clock's now")
	assert.Equal(t, 100, admitted, "one request per window over 100 windows with Limit %d: only %d admitted", L, admitted)
}

// preemptingClock is a Clock whose reading is taken, and then, once armed,
// "the goroutine is preempted" before the reading is returned: meanwhile the
// time moves on by lag and the sweeper runs (here: Engine.Sweep, which reads
// this clock too). It models a goroutine that reads the clock in Allow and is
// descheduled (GC, overload) before it loads the key.
type preemptingClock struct {
	ns     atomic.Int64
	armed  atomic.Bool
	lag    time.Duration
	during func()
}

func (c *preemptingClock) UnixNano() int64 {
	v := c.ns.Load()
	if c.armed.CompareAndSwap(true, false) {
		c.ns.Add(int64(c.lag))
		c.during()
	}
	return v
}

// Regression: An increment racing with reclamation: a writer whose time was read
// before the sweeper reclaimed the key, but that reaches the table after the
// key was deleted, creates a fresh state at its own (older) time. Every
// count of the reclaimed state is then forgotten although some are still
// inside that writer's window, so the key's time runs backwards across the
// reclamation and a true window of length W holds 2·Limit for Strict and
// SlidingLog (whose hard bound is ≤ Limit), and 2·Limit for SlidingWindow
// (whose bound is < 2·Limit). The sweeper's decision itself is legitimate
// (the key was idle for more than Window + one sub-window at its now); the
// design's "a replacement starts at max(t, R)" covers writers that loaded the
// old ring, not writers that find the key already deleted.
//
// Deterministic: the "preemption" is a Clock implementation (public API).
func TestWriterBehindSweepDoesNotReviveKeyInThePast(t *testing.T) {
	const L = 5
	for _, tc := range []struct {
		alg      engine.Algorithm
		lag      time.Duration // how far the sweep's now is past the writer's
		first    time.Duration // offset of the first burst from the grid-aligned base
		second   time.Duration // the preempted writer's reading
		boundMax int64         // the documented worst true count in a window
	}{
		// Burst at the end of sub-window 0; sweep at 1.2s (idle 1.101s > W+w);
		// the writer read 1.0s (200ms earlier). Window (0, 1.0s] holds 2L.
		{engine.SlidingWindowStrict, 200 * time.Millisecond, 99 * time.Millisecond, 1000 * time.Millisecond, L},
		// Weighted: the writer read 0.9s (300ms behind); (−0.1s, 0.9s] holds 2L.
		{engine.SlidingWindow, 300 * time.Millisecond, 99 * time.Millisecond, 900 * time.Millisecond, 2*L - 1},
		// Log: reclaimed once idle just over W; the writer 50ms behind.
		{engine.SlidingLog, 50 * time.Millisecond, 99 * time.Millisecond, 1050 * time.Millisecond, L},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			base := time.Unix(1_700_000_000, 0) // on the grid
			clk := &preemptingClock{lag: tc.lag}
			clk.ns.Store(base.Add(tc.first).UnixNano())
			e := newEngine(t, engine.Config{Limit: L, Window: time.Second, SubWindows: 10, Algorithm: tc.alg, Clock: clk, SweepInterval: time.Hour})
			reclaimed := 0
			clk.during = func() { reclaimed = e.Sweep() }

			require.True(t, e.AllowN("k", L).Allowed) // L units at base+first
			require.False(t, e.AllowN("k", 1).Allowed)

			clk.ns.Store(base.Add(tc.second).UnixNano())
			clk.armed.Store(true)
			d := e.AllowN("k", L) // reads base+second, then is "preempted" while the sweeper runs
			require.Equal(t, 1, reclaimed, "the sweeper (at base+%v) reclaimed the key", tc.second+tc.lag)
			// The second batch is counted at its effective time, which
			// must be at or after the sweep's (the key's state starts
			// there); with the first burst it may share no window in
			// which the two together break the algorithm's bound.
			_, eff := e.AllowAtTrace("k", 0, base.Add(tc.second))
			first := base.Add(tc.first).UnixNano()
			shared := false // the two batches lie in one counted window
			switch tc.alg {
			case engine.SlidingLog:
				shared = eff-first < int64(time.Second)
			case engine.SlidingWindowStrict: // N+1 consecutive sub-windows
				shared = eff-first/int64(100*time.Millisecond) <= 10
			case engine.SlidingWindow: // N consecutive sub-windows
				shared = eff-first/int64(100*time.Millisecond) <= 9
			}
			inWindow := int64(L)
			if d.Allowed && shared {
				inWindow += L
			}
			require.LessOrEqual(t, inWindow, tc.boundMax,
				"%v: %d units admitted in one window: the first burst at base+%v, the second (read at base+%v) at effective %d; decision %+v",
				tc.alg, inWindow, tc.first, tc.second, eff, d)
			require.True(t, d.Allowed, "the key was idle and reclaimed: the second batch fits at the sweep's time")
		})
	}
}

// Log grown by SetLimit (old ring retired by Grow), then the key reclaimed
// and recreated, with the clock put back and a new reservation at the very
// same instant. The old reservation's Cancel must not remove the new
// state's units.
func TestLogGrowReclaimRecreateSameInstant(t *testing.T) {
	for _, back := range []bool{false, true} {
		clk := engine.NewManualClock(t0)
		W := time.Second
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: W, Algorithm: engine.SlidingLog, Clock: clk, PerKeyLimits: true, SweepInterval: time.Hour})
		r := e.ReserveAt("k", 2, t0)
		if err := e.SetLimitAt("k", 40, t0); err != nil {
			t.Fatal(err)
		}
		clk.Set(t0.Add(5 * W))
		if n := e.Sweep(); n != 1 {
			t.Fatalf("swept %d", n)
		}
		if back {
			clk.Set(t0)
		}
		r2 := e.ReserveAt("k", 2, t0)
		if !r2.Decision().Allowed {
			t.Fatal("denied")
		}
		got := r.Cancel()
		rem := e.AllowAt("k", 0, r2.At()).Remaining
		t.Logf("back=%v: new at %v, old Cancel=%v, remaining %d", back, r2.At().Sub(t0), got, rem)
		if got || rem != 0 {
			t.Errorf("back=%v: old reservation's Cancel after reclamation returned %v, new key remaining %d (want false, 0)", back, got, rem)
		}
	}
}

// As above, but the key's new state is created by SetLimitAt at the old
// instant (SetLimitAt creates a key's state "at now if it has none").
func TestLogGrowReclaimSetLimitRecreate(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		for _, back := range []bool{false, true} {
			clk := engine.NewManualClock(t0)
			W := time.Second
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: W, SubWindows: 4, Algorithm: alg, Clock: clk, PerKeyLimits: true, SweepInterval: time.Hour})
			r := e.ReserveAt("k", 2, t0)
			if err := e.SetLimitAt("k", 40, t0); err != nil {
				t.Fatal(err)
			}
			clk.Set(t0.Add(5 * W))
			if n := e.Sweep(); n != 1 {
				t.Fatalf("swept %d", n)
			}
			if back {
				clk.Set(t0)
			}
			if err := e.SetLimitAt("k", 40, t0); err != nil {
				t.Fatal(err)
			}
			r2 := e.ReserveAt("k", 2, t0)
			if !r2.Decision().Allowed {
				t.Fatal("denied")
			}
			got := r.Cancel()
			rem := e.AllowAt("k", 0, r2.At()).Remaining
			t.Logf("%v back=%v: new at %v, old Cancel=%v, remaining %d", alg, back, r2.At().Sub(t0), got, rem)
			if got || rem != 38 {
				t.Errorf("%v back=%v: old reservation's Cancel after reclamation returned %v, new key remaining %d (want false, 38)", alg, back, got, rem)
			}
		}
	}
}

// Two sweeps of one table at once (a caller's Sweep beside another, or
// beside the background sweeper) must neither store an empty state for a
// key that the other sweep deleted nor crash a later decision.
func TestConcurrentSweepsKeepTheTableSound(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0)
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: alg, Clock: clk, DisableEviction: true, Shards: 4})
			keys := scaled(5000, 20_000)
			for i := range keys {
				require.True(t, e.Allow(fmt.Sprint("k", i)))
			}
			clk.Advance(10 * time.Second)
			var wg sync.WaitGroup
			var swept [2]int
			for g := range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); swept[g] = e.Sweep() }()
			}
			wg.Wait()
			require.Equal(t, keys, swept[0]+swept[1], "every key reclaimed exactly once")
			require.Zero(t, e.Len())
			require.Zero(t, e.Sweep(), "nothing left to reclaim, and no empty state stored")
			for i := range keys {
				k := fmt.Sprint("k", i)
				d, panicked := allowNoPanic(e, k)
				require.False(t, panicked, "AllowN(%q) panicked", k)
				require.True(t, d.Allowed, k)
				require.Equal(t, int64(4), d.Remaining, k)
			}
			require.Equal(t, int64(keys), e.Len())
		})
	}
}

func allowNoPanic(e *engine.Engine, key string) (d engine.Decision, panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	return e.AllowN(key, 1), false
}
