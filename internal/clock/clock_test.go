package clock

import (
	"runtime"
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

func TestCoarseStopEndsItsGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	c := NewCoarse(time.Millisecond)
	first := c.UnixNano()
	require.NotZero(t, first)
	require.Equal(t, time.Millisecond, c.Resolution())
	c.Stop()
	c.Stop() // idempotent
	// Stop waits for the goroutine to exit, so the count is back at once.
	require.Equal(t, before, runtime.NumGoroutine())
	require.GreaterOrEqual(t, c.UnixNano(), first)
}
