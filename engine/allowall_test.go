package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
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

// Goroutines race AllowAll over two engines at one instant: every engine
// must hold exactly the units of the calls that were admitted (a refused
// call leaves nothing behind), and a sequential top-up afterwards reaches
// the tighter limit exactly (nothing was lost either).
func TestAllowAllConcurrent(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			a := newEngine(t, engine.Config{Limit: 50, Window: time.Second, Algorithm: alg, DisableEviction: true})
			b := newEngine(t, engine.Config{Limit: 30, Window: time.Minute, Algorithm: alg, DisableEviction: true})
			reqs := []engine.Request{{Engine: a, Key: "k", N: 1}, {Engine: b, Key: "k", N: 1}}
			const goroutines, calls = 8, 40
			admitted := make(chan int, goroutines)
			for range goroutines {
				go func() {
					k := 0
					for range calls {
						if i, _ := engine.AllowAll(t0, reqs...); i < 0 {
							k++
						}
					}
					admitted <- k
				}()
			}
			total := 0
			for range goroutines {
				select {
				case k := <-admitted:
					total += k
				case <-time.After(30 * time.Second):
					t.Fatal("AllowAll did not return")
				}
			}
			require.Equal(t, int64(50-total), a.AllowAt("k", 0, t0).Remaining, "a holds the admitted calls' units only")
			require.Equal(t, int64(30-total), b.AllowAt("k", 0, t0).Remaining, "b holds the admitted calls' units only")
			for {
				i, _ := engine.AllowAll(t0, reqs...)
				if i >= 0 {
					require.Equal(t, 1, i, "b, the tighter limit, refuses")
					break
				}
				total++
			}
			require.Equal(t, 30, total)
			require.Equal(t, int64(20), a.AllowAt("k", 0, t0).Remaining)
		})
	}
}
