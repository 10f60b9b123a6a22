package engine_test

// Regression tests for the defects an adversarial review found in the first
// engine (one test per defect, named after it). Each failed on that engine.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// Two sweeps of one table at once (a caller's Sweep beside another, or
// beside the background sweeper) must neither store an empty state for a
// key that the other sweep deleted nor crash a later decision.
func TestDefectConcurrentSweepsKeepTheTableSound(t *testing.T) {
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

// A SetLimit override outlives any idle gap up to the documented one
// (Window plus one sub-window; FixedWindow 2·Window; SlidingLog Window),
// whatever the request's offset in its sub-window, and then goes.
func TestDefectOverrideSurvivesTheDocumentedIdleGap(t *testing.T) {
	const w = 100 * time.Millisecond
	for _, tc := range []struct {
		alg        engine.Algorithm
		keep, gone time.Duration // idle gaps: kept up to keep, reclaimed by gone
	}{
		{engine.SlidingWindow, time.Second + w, time.Second + 2*w},
		{engine.SlidingWindowStrict, time.Second + w, time.Second + 2*w},
		{engine.FixedWindow, 2 * time.Second, 3 * time.Second},
		{engine.SlidingLog, time.Second, time.Second + 1},
	} {
		for _, off := range []time.Duration{0, time.Nanosecond, 50 * time.Millisecond, 999 * time.Millisecond, w - 1} {
			t.Run(fmt.Sprint(tc.alg, "/", off), func(t *testing.T) {
				t0 := time.Unix(1_700_000_000, 0)
				clk := engine.NewManualClock(t0)
				e := newEngine(t, engine.Config{Limit: 100, Window: time.Second, SubWindows: 10, Algorithm: tc.alg, Clock: clk, PerKeyLimits: true, SweepInterval: time.Hour})
				require.NoError(t, e.SetLimit("abuser", 1))
				clk.Advance(off)
				require.True(t, e.Allow("abuser"))
				clk.Advance(tc.keep)
				require.Zero(t, e.Sweep())
				d := e.AllowN("abuser", 0)
				require.Equal(t, int64(1), d.Limit, "override lost after %v idle", tc.keep)
				clk.Advance(tc.gone - tc.keep)
				require.Equal(t, 1, e.Sweep(), "still held after %v idle", tc.gone)
				require.Equal(t, int64(100), e.AllowN("abuser", 0).Limit)
			})
		}
	}
}

// A key idle for 2^24 sub-windows on one slot of its ring while requests
// keep coming on the other must not see that slot's old count as new: the
// writers settle stale slots themselves, with no sweeper running.
func TestDefectSkippedSlotNeverAliases(t *testing.T) {
	for _, step := range []int64{1<<21 - 2, 1 << 21, 1<<20 + 6} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 1, DisableEviction: true})
			at := func(epoch int64) time.Time { return time.Unix(epoch, 0) } // w = 1s
			const b = 1 << 25
			require.True(t, e.AllowAt("k", 10, at(b+1)).Allowed) // the odd slot, full
			end := int64(b + 2 + 1<<24)                          // its tag comes round again at end−1
			for x := int64(b + 2 + step); ; x += step {
				x = min(x, end)
				d := e.AllowAt("k", 1, at(x))
				require.True(t, d.Allowed, "epoch b+%d", x-b)
				require.Equal(t, int64(9), d.Remaining, "epoch b+%d", x-b)
				if x == end {
					break
				}
			}
		})
	}
}

// Times outside int64 Unix nanoseconds are judged by the time.Time: refused
// with RetryAfter Never, and the key is left untouched.
func TestDefectUnrepresentableTimesAreRefused(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 2, Window: time.Hour, Algorithm: alg, DisableEviction: true})
			for _, bad := range []time.Time{
				time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), // UnixNano wraps to 2169
				time.Unix(-1, 0),
				time.Date(2262, 4, 11, 23, 47, 16, 854775808, time.UTC), // one past the last ns
				time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
			} {
				d := e.AllowAt("k", 1, bad)
				require.False(t, d.Allowed, bad.String())
				require.Equal(t, engine.Never, d.RetryAfter, bad.String())
				require.Zero(t, e.Len(), "%v created state", bad)
			}
			last := time.Date(2262, 4, 11, 23, 47, 16, 854775807, time.UTC)
			require.True(t, e.AllowAt("edge", 1, last).Allowed, "the last representable nanosecond")
			h := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := range 10 {
				require.True(t, e.AllowAt("k", 1, h.Add(time.Duration(i)*time.Hour)).Allowed, "hour %d", i)
			}
		})
	}
	clk := engine.NewManualClock(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEngine(t, engine.Config{Limit: 2, Window: time.Hour, Clock: clk, DisableEviction: true})
	d := e.AllowN("k", 1)
	require.Equal(t, engine.Never, d.RetryAfter, "a manual clock set before 1970 is refused")
	require.Zero(t, e.Len())
}
