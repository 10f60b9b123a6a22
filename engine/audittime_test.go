package engine_test

import (
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// TestAuditClockBackwards: a decision older than the key's newest
// sub-window is made at that sub-window's start, by the engine and by the
// audit; it erases nothing and gains nothing.
func TestAuditClockBackwards(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, DisableEviction: true})
			ref := newModel(engine.Config{Limit: 5, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1})
			for _, step := range []struct {
				n  int64
				at time.Duration
			}{{3, 900 * time.Millisecond}, {2, 2 * time.Second}, {3, 100 * time.Millisecond}, {1, 2500 * time.Millisecond}, {5, -time.Hour}, {5, 3950 * time.Millisecond}, {1, 3 * time.Second}} {
				now := t0.Add(step.at)
				ref.observe("k", step.n, now, e.AllowAt("k", step.n, now))
			}
			got := e.Audit()
			ref.checkAudit(t, got)
			if alg != engine.FixedWindow {
				require.LessOrEqual(t, got.WorstWindow, 1.0)
			}
		})
	}
}

// TestAuditEvictedAndRecreatedInThePast: a key reclaimed by the sweep and
// recreated by a request older than its retirement is placed, by the
// engine, at the retirement time (docs/design.md §5); the audit judges it
// there, where the old units have left the window, not at the request's
// own time, where they would still count.
func TestAuditEvictedAndRecreatedInThePast(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0.Add(10 * time.Second))
			e := newEngine(t, engine.Config{Limit: 3, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, Clock: clk, SweepInterval: time.Hour})
			require.True(t, e.AllowAt("k", 3, t0.Add(10*time.Second)).Allowed)
			clk.Advance(5 * time.Second)
			require.Equal(t, 1, e.Sweep())
			d := e.AllowAt("k", 3, t0.Add(10500*time.Millisecond)) // before the retirement, inside the old window
			require.True(t, d.Allowed, "%+v", d)
			r := e.Audit()
			require.Equal(t, int64(2), r.Judged)
			require.Zero(t, r.FalseAdmits, "%+v", r)
			require.Equal(t, 1.0, r.WorstWindow)
		})
	}
}

// TestAuditTimeEdges: decisions at the first and the last representable
// instants, and a window near MaxWindow, neither overflow nor lose counts.
func TestAuditTimeEdges(t *testing.T) {
	for _, w := range []time.Duration{time.Second, engine.MaxWindow} {
		e := newEngine(t, engine.Config{Limit: 2, Window: w, SubWindows: 1, Audit: 1, DisableEviction: true})
		first, last := time.Unix(0, 0), time.Unix(0, math.MaxInt64)
		require.True(t, e.AllowAt("a", 2, first).Allowed)
		require.False(t, e.AllowAt("a", 1, first).Allowed)
		require.True(t, e.AllowAt("b", 2, last).Allowed)
		require.False(t, e.AllowAt("b", 1, last).Allowed)
		e.AllowAt("c", 1, time.Unix(0, -1)) // before 1970: refused, not audited
		r := e.Audit()
		require.Equal(t, int64(4), r.Decisions, "W = %v", w)
		require.Equal(t, int64(4), r.Judged)
		require.Zero(t, r.FalseAdmits+r.FalseDenies)
		require.Equal(t, 1.0, r.WorstWindow)
	}
}

// TestAuditLaggingKey is what the fuzzer found: a key idle for two windows
// of the audit's time has its log pruned; when its own timeline then comes
// back less than a window after its last unit (it lags the other keys by
// more than a window), that unit is missing from the new log, and the
// decision is replayed but not judged.
func TestAuditLaggingKey(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 4, Algorithm: engine.SlidingWindowStrict, Audit: 1, DisableEviction: true})
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	require.True(t, e.AllowAt("a", 5, ms(1480)).Allowed)
	require.True(t, e.AllowAt("b", 1, ms(3520)).Allowed)
	e.Audit() // a's log, idle for more than two windows at 3.52 s, goes
	// a at 2.45 s: its 5 units at 1.48 s are inside (1.45 s, 2.45 s], and
	// the engine, which still holds them, refuses.
	require.False(t, e.AllowAt("a", 1, ms(2450)).Allowed)
	r := e.Audit()
	require.Equal(t, int64(1), r.Unjudged, "%+v", r)
	require.Zero(t, r.FalseDenies, "judged on the new, empty log it would be a false deny")
	// Once past the end of the lost units' window, a is judged again.
	require.True(t, e.AllowAt("a", 5, ms(2500)).Allowed)
	require.Equal(t, int64(1), e.Audit().Unjudged)
	require.True(t, e.AllowAt("b", 1, ms(3600)).Allowed)
	r = e.Audit()
	require.Equal(t, int64(1), r.Unjudged)
	require.Equal(t, int64(4), r.Judged)
	require.Zero(t, r.FalseDenies+r.FalseAdmits)
}
