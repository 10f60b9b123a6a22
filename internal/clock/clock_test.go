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

func TestManualAfter(t *testing.T) {
	m := NewManual(time.Unix(100, 0))
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	a, stopA := m.After(10)
	b, stopB := m.After(20)
	c, _ := m.After(0)
	if !closed(c) {
		t.Fatal("After(0) must end at once")
	}
	if m.Waits() != 2 {
		t.Fatalf("Waits() = %d, want 2", m.Waits())
	}
	m.Advance(9)
	if closed(a) || closed(b) {
		t.Fatal("a wait ended before the clock reached it")
	}
	m.Advance(1)
	if !closed(a) || closed(b) {
		t.Fatal("Advance to a's end must end a only")
	}
	stopA() // after it ended: harmless
	stopB()
	stopB() // idempotent
	if m.Waits() != 0 {
		t.Fatalf("Waits() = %d after stop, want 0", m.Waits())
	}
	m.Set(time.Unix(200, 0))
	if closed(b) {
		t.Fatal("a stopped wait must not end")
	}
	d, _ := m.After(5)
	m.Set(time.Unix(200, 5))
	if !closed(d) {
		t.Fatal("Set to the end must end the wait")
	}
}

// After racing Advance: no wait is missed. Each After(1) is followed by
// one more Advance(1) once both goroutines are done, which must end it.
func TestManualAfterRacesAdvance(t *testing.T) {
	m := NewManual(time.Unix(100, 0))
	const n = 2000
	chs := make(chan (<-chan struct{}), n)
	done := make(chan struct{})
	go func() {
		for range n {
			ch, _ := m.After(2)
			chs <- ch
		}
		close(done)
	}()
	for range n {
		m.Advance(1)
	}
	<-done
	m.Advance(2)
	close(chs)
	for ch := range chs {
		select {
		case <-ch:
		default:
			t.Fatal("a wait whose end the clock passed did not end")
		}
	}
	if m.Waits() != 0 {
		t.Fatalf("Waits() = %d, want 0", m.Waits())
	}
}

// A driven coarse clock holds its reading until Refresh; once stopped it
// reads its precise source, and a Refresh after Stop changes nothing.
func TestCoarseDrivenAndStopped(t *testing.T) {
	src := NewManual(time.Unix(1000, 0))
	c := NewCoarseDriven(src, time.Millisecond)
	src.Advance(time.Second)
	require.Equal(t, time.Unix(1000, 0).UnixNano(), c.UnixNano())
	c.Refresh()
	require.Equal(t, time.Unix(1001, 0).UnixNano(), c.UnixNano())
	src.Advance(time.Second)
	c.Stop()
	c.Stop()
	require.Equal(t, time.Unix(1002, 0).UnixNano(), c.UnixNano())
	c.Refresh()
	src.Advance(time.Second)
	require.Equal(t, time.Unix(1003, 0).UnixNano(), c.UnixNano())
}
