package clock

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMonotonicTracksWallTimeAndNeverGoesBack(t *testing.T) {
	m := NewMonotonic()
	before := time.Now().UnixNano()
	a := m.UnixNano()
	b := m.UnixNano()
	require.LessOrEqual(t, a, b)
	// Anchored at the wall clock: within a second of time.Now.
	require.InDelta(t, float64(before), float64(a), float64(time.Second))
}

func TestManual(t *testing.T) {
	t0 := time.Unix(1000, 5)
	m := NewManual(t0)
	require.Equal(t, t0.UnixNano(), m.UnixNano())
	m.Advance(time.Second)
	require.Equal(t, t0.Add(time.Second).UnixNano(), m.UnixNano())
	m.Set(t0)
	require.Equal(t, t0.UnixNano(), m.UnixNano())
}

// Stop ends this clock's own refresher. The test looks for that goroutine
// by the clock's address in the stacks, not at runtime.NumGoroutine, which
// other goroutines move and which a goroutine that has closed done but not
// yet returned still counts.
func TestCoarseStopEndsItsGoroutine(t *testing.T) {
	c := NewCoarse(time.Millisecond)
	run := fmt.Sprintf("clock.(*Coarse).run(%p", c)
	requireStacks(t, run, true)
	first := c.UnixNano()
	require.NotZero(t, first)
	require.Equal(t, time.Millisecond, c.Resolution())
	c.Stop()
	c.Stop() // idempotent
	requireStacks(t, run, false)
	require.GreaterOrEqual(t, c.UnixNano(), first)
}

// requireStacks checks that some goroutine's stack contains s (want) or
// that none does. A goroutine just started or just told to exit may take a
// moment to show or to go, so yield (no sleep) until a deadline.
func requireStacks(t *testing.T, s string, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for stacksContain(s) != want && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	require.Equal(t, want, stacksContain(s), "a goroutine running %q: want %v", s, want)
}

func stacksContain(s string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), s)
}

func TestUnixNanoJudgesTheTimeItself(t *testing.T) {
	for _, c := range []struct {
		t    time.Time
		want int64
	}{
		{time.Unix(0, 0), 0},
		{time.Unix(1_700_000_000, 5), 1_700_000_000_000_000_005},
		{time.Unix(0, math.MaxInt64), math.MaxInt64},
		{time.Unix(0, math.MaxInt64).Add(1), -1},
		{time.Unix(-1, 999_999_999), -1},
		{time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), -1}, // UnixNano would say 2169
		{time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), -1},
		{time.Time{}, -1},
	} {
		require.Equal(t, c.want, UnixNano(c.t), c.t.String())
	}
	require.Equal(t, int64(-1), NewManual(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)).UnixNano())
}
