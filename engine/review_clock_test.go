package engine_test

// Tests written by an adversarial review of the engine that had only the
// public API and the documented promises: ADV-n tests reproduce the defects
// it found (each failed before its fix), "Held" tests the attacks that did
// not break it.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// ADV-1. A sweep while the engine's Clock reads a time outside 1970…2262
// (ManualClock.Set to such a time reads −1) must leave every key untouched:
// such a time is refused for decisions, and a key with counts inside its
// window must never be reclaimed. Here Sweep() reclaims live keys, and the
// next requests are admitted on a fresh state: a window of length W then
// holds 2·Limit under SlidingWindowStrict.
func TestAdvSweepAtUnrepresentableClockReclaimsLiveKeys(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, bad := range []time.Time{time.Unix(-1, 0), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)} {
			t.Run(alg.String()+"/"+bad.Format("2006"), func(t *testing.T) {
				t0 := time.Unix(1_700_000_000, 0)
				clk := engine.NewManualClock(t0)
				e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: alg, Clock: clk, SweepInterval: time.Hour})
				d := e.AllowN("k", 5)
				require.True(t, d.Allowed)
				require.False(t, e.AllowN("k", 1).Allowed, "full")

				clk.Set(bad) // e.g. a test clock briefly set to an invalid time
				require.Equal(t, engine.Never, e.AllowN("k", 1).RetryAfter, "a decision at that time is refused")
				n := e.Sweep()
				clk.Set(t0)

				assert.Zero(t, n, "Sweep at an unrepresentable clock reclaimed %d live key(s)", n)
				d = e.AllowN("k", 1)
				require.False(t, d.Allowed, "the window at t0 already holds 5 = Limit units; got %+v", d)
			})
		}
	}
}

// ADV-2. SetLimit while the engine's Clock reads a time outside 1970…2262
// (NewManualClock(time.Time{}) reads −1) must not create a state at a bogus
// time: it is an error that changes nothing, and SetLimitAt on the caller's
// own timeline is the way for a caller who drives AllowAt.
func TestAdvSetLimitAtUnrepresentableClock(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(time.Time{}) // reads −1
			e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: alg, Clock: clk, PerKeyLimits: true})
			require.ErrorContains(t, e.SetLimit("k", 2), "before 1970 or after 2262")
			require.Zero(t, e.Len(), "a refused SetLimit creates nothing")
			t0 := time.Unix(1_700_000_000, 0)
			require.ErrorContains(t, e.SetLimitAt("k", 2, time.Time{}), "before 1970 or after 2262")
			require.NoError(t, e.SetLimitAt("k", 2, t0))
			for i := 0; i < 2; i++ {
				d := e.AllowAt("k", 1, t0)
				require.True(t, d.Allowed, "request %d: %+v", i, d)
				require.Equal(t, int64(2), d.Limit, "the SetLimit override is lost")
			}
			d := e.AllowAt("k", 1, t0)
			require.False(t, d.Allowed)
			// A minute later, the window is empty.
			d = e.AllowAt("k", 1, t0.Add(time.Minute))
			require.True(t, d.Allowed, "a minute later the window is empty, got %+v", d)
			require.Equal(t, int64(2), d.Limit, "the SetLimit override is lost")
			require.NoError(t, e.UpdateLimits(func(string, int64) int64 { return 3 }), "it creates nothing, so the clock does not matter")
		})
	}
}

// ADV-3. The README's recipe for a timeline of one's own: "set
// DisableEviction", and provision limits with SetLimitAt on that timeline.
// The key is then created on the caller's timeline, not at the engine's
// Clock: a replay of an older timeline is not clamped forward to the
// clock's sub-window, and a later one does not retire it at the first
// request and lose the override.
func TestAdvSetLimitOnNewKeyIgnoresCallerTimeline(t *testing.T) {
	for _, tc := range []struct {
		name string
		t0   time.Time
	}{
		{"replay-2020", time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"simulate-2035", time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Default (real) clock, as the README allows with DisableEviction.
			e := newEngine(t, engine.Config{Limit: 100, Window: time.Second, PerKeyLimits: true, DisableEviction: true})
			require.NoError(t, e.SetLimitAt("tenant", 3, tc.t0)) // provision before traffic
			for i := 0; i < 20; i++ {
				at := tc.t0.Add(time.Duration(i) * 500 * time.Millisecond) // 2 per window < 3
				d := e.AllowAt("tenant", 1, at)
				require.Equal(t, int64(3), d.Limit, "request %d: override lost", i)
				require.True(t, d.Allowed, "request %d at %v: 2 per second under a limit of 3, got %+v", i, at, d)
			}
		})
	}
}
