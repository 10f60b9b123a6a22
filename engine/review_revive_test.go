package engine_test

// Tests written by an adversarial review of the engine that had only the
// public API and the documented promises: ADV-n tests reproduce the defects
// it found (each failed before its fix), "Held" tests the attacks that did
// not break it.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

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

// ADV-6. An increment racing with reclamation: a writer whose time was read
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
func TestAdvWriterBehindSweepRevivesKeyInThePast(t *testing.T) {
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
