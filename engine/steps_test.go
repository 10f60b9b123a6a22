package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// step is one request at a fixed instant t0+at and the decision it must get.
type step struct {
	at         time.Duration
	n          int64
	allowed    bool
	remaining  int64
	retryAfter time.Duration
}

func runSteps(t *testing.T, cfg engine.Config, steps []step) {
	t.Helper()
	cfg.DisableEviction = true
	e, err := engine.New(cfg)
	require.NoError(t, err)
	defer e.Close()
	for i, s := range steps {
		d := e.AllowAt("k", s.n, t0.Add(s.at))
		require.Equal(t, s.allowed, d.Allowed, "step %d (t0+%v, n=%d): %+v", i, s.at, s.n, d)
		require.Equal(t, s.remaining, d.Remaining, "step %d remaining: %+v", i, d)
		require.Equal(t, s.retryAfter, d.RetryAfter, "step %d retryAfter: %+v", i, d)
		require.Equal(t, cfg.Limit, d.Limit, "step %d limit", i)
	}
}

const ms = time.Millisecond

// L=4, W=1s, N=2: sub-windows of 500ms. t0 is on the grid.
func TestStepsWeighted(t *testing.T) {
	runSteps(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2}, []step{
		{0, 4, true, 0, 0},
		// Full. The 4 leave the fully counted part at t0+1s and then decay:
		// 4·(500−r)/500 + 1 ≤ 4 from r = 125ms.
		{0, 1, false, 0, 1125 * ms},
		{1100 * ms, 1, false, 0, 25 * ms},  // estimate 3.2
		{1125 * ms, 1, true, 0, 0},         // estimate 3, exactly room for 1
		{1250 * ms, 2, false, 1, 125 * ms}, // estimate 1 + 2 = 3
		{1250 * ms, 1, true, 0, 0},
		// The clock goes back: treated as the start of the newest
		// sub-window (t0+1s), where the old 4 weigh in full: no capacity
		// is gained, and nothing is erased. It fits at t0+1.375s, 475ms
		// after the caller's now.
		{900 * ms, 1, false, 0, 475 * ms},
		{1500 * ms, 2, true, 0, 0}, // t0's 4 are out; 2 remain counted
		{1500 * ms, 0, true, 0, 0}, // n = 0 changes nothing
		{1500 * ms, 5, false, 0, engine.Never},
	})
}

func TestStepsStrict(t *testing.T) {
	runSteps(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2, Algorithm: engine.SlidingWindowStrict}, []step{
		{0, 4, true, 0, 0},
		{0, 1, false, 0, 1500 * ms},        // t0's sub-window counts until t0+1.5s
		{1100 * ms, 1, false, 0, 400 * ms}, // no decay within a sub-window
		{1500 * ms, 4, true, 0, 0},
		{1999 * ms, 1, false, 0, 1001 * ms},
		{3000 * ms, 3, true, 1, 0},
	})
}

func TestStepsFixed(t *testing.T) {
	runSteps(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.FixedWindow}, []step{
		{0, 4, true, 0, 0},
		{0, 1, false, 0, time.Second},
		{999 * ms, 1, false, 0, ms},
		{time.Second, 4, true, 0, 0}, // 8 within 1ms: fixed window's 2L
		{time.Second + 500*ms, 1, false, 0, 500 * ms},
	})
}

// The exact log: a unit at s counts at t iff t−W < s ≤ t, so RetryAfter is
// the time the k-th oldest unit leaves (its s + W) minus now, where k units
// must leave for n to fit.
func TestStepsLog(t *testing.T) {
	runSteps(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.SlidingLog}, []step{
		{0, 4, true, 0, 0},
		{0, 1, false, 0, time.Second},     // the oldest unit (t0) leaves at t0+1s
		{500 * ms, 1, false, 0, 500 * ms}, // no decay: each unit counts until it leaves
		{999 * ms, 2, false, 0, ms},       // two must leave; both are t0's
		{time.Second, 3, true, 1, 0},      // t0's 4 are out exactly at t0+1s
		{1200 * ms, 1, true, 0, 0},
		{1500 * ms, 2, false, 0, 500 * ms}, // the 2nd oldest is one of t0+1s's 3
		{1500 * ms, 4, false, 0, 700 * ms}, // all 4 must leave: the last at t0+2.2s
		// The clock goes back: treated as the newest time the key has seen
		// (t0+1.5s, set by the denials), not the start of a sub-window. It
		// fits at t0+2s, 1.1s after the caller's now.
		{900 * ms, 1, false, 0, 1100 * ms},
		{1999 * ms, 0, true, 0, 0},
		{2 * time.Second, 0, true, 3, 0},
		{2 * time.Second, 5, false, 3, engine.Never},
		{2200 * ms, 4, true, 0, 0},
		{3199999999, 1, false, 0, 1}, // to the nanosecond
		{3200 * ms, 4, true, 0, 0},
		{3200 * ms, -1, false, 0, engine.Never},
	})
}

// A key idle for 2^24 sub-windows on one slot of its ring while requests
// keep coming on the other must not see that slot's old count as new: the
// writers settle stale slots themselves, with no sweeper running.
func TestSkippedSlotNeverAliases(t *testing.T) {
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
