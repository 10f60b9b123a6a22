package ringslot

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/internal/pack"
)

// A writer loads last, clamps, and stalls while other writers move the key
// about 2^23 sub-windows on, onto its slot: the slot's newer tag then looks
// older by serial comparison. On waking the writer must re-clamp, not reset
// the slot: a reset would wipe their count (20 units in one window of 10).
func TestStalledWriterNeverWipesANewerSlot(t *testing.T) {
	const w = sec / 1000
	g := NewGeometry(w, 10, true, false)
	r := g.New(t0, 0, "k")
	e := t0 / w
	// The target epoch: on the stalled writer's slot, just over 2^23 ahead.
	ahead := int64(1<<23 + 11 - (1<<23)%11)
	target := e + ahead
	require.Less(t, pack.Diff(pack.TagOf(target), pack.TagOf(e)), int32(0), "the newer tag must look older")
	stalled := true
	g.testHookClamped = func(int64) {
		if !stalled {
			return
		}
		stalled = false
		// Others advance the key in steps below the revive gap, then fill
		// the target sub-window.
		for x := e; x < target; {
			x = min(x+reviveGap-1, target)
			res := g.Acquire(r, x*w, 1, 10)
			require.True(t, res.Allowed, "step to e+%d: %+v", x-e, res)
		}
		room := g.Peek(r, target*w, 0, 10).Remaining
		require.True(t, g.Acquire(r, target*w, room, 10).Allowed)
		require.Equal(t, int64(0), g.Peek(r, target*w, 0, 10).Remaining)
	}
	res := g.Acquire(r, e*w, 10, 10)
	require.False(t, stalled, "the hook ran")
	require.False(t, res.Allowed, "the stalled writer was admitted: %+v", res)
	require.Equal(t, target, res.Epoch, "it must decide at the key's newest epoch")
	require.Equal(t, int64(0), g.Peek(r, target*w, 0, 10).Remaining, "a count inside the window was wiped")
}

// A denial's RetryAfter is computed from a view and re-reads of the older
// slots; when concurrent writers changed those slots in between, it must
// still be a finite wait (by N+1 sub-windows every unit of the view has
// left), never Never for a request that fits the limit. Found by the stress
// checker.
func TestRetryAfterIsFiniteWhenSlotsChangedUnderTheView(t *testing.T) {
	const w = sec / 10
	for _, weighted := range []bool{true, false} {
		g := NewGeometry(w, 10, weighted, false)
		r := g.New(t0, 0, "k")
		e := t0 / w
		// A view that counted 10 units in older slots which now read empty.
		v := view{full: 10}
		got := g.retryAfter(r, e, g.index(e), w/2, v, 1, 10)
		require.Equal(t, 11*w-w/2, got, "weighted=%v", weighted)
	}
}
