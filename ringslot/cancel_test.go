package ringslot

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/internal/pack"
)

// Cancel after a publish: 6 units reserved at x; P at x+1 walks and caches
// them; the reservation is cancelled. Without invalidate the cache would
// keep the 6 for the rest of x+1 (a false denial of up to 6 units).
func TestCancelAfterAPublishInvalidates(t *testing.T) {
	const w = sec / 10
	g := NewGeometry(w, 10, true, false)
	r := g.New(t0, 0, "k")
	x := t0 / w
	res := g.Acquire(r, x*w, 6, 10)
	require.True(t, res.Allowed)
	require.True(t, g.Acquire(r, (x+1)*w, 1, 10).Allowed) // walks, caches 6
	full, _ := cacheWords(g, r)
	require.Equal(t, pack.Word(pack.TagOf(x+1), 6), full)
	ok, dead := g.Cancel(r, res.Epoch, 6)
	require.True(t, ok)
	require.False(t, dead)
	full, _ = cacheWords(g, r)
	require.NotEqual(t, pack.TagOf(x+1), pack.TagOfWord(full), "the cache word is behind: the next writer walks")
	require.True(t, g.Acquire(r, (x+1)*w, 9, 10).Allowed, "the 6 returned units are room again")
}

// A publisher stalled between its walk (which counted the reserved units)
// and its publish, while the reservation is cancelled: its CAS is from the
// word read before the walk, which Cancel's marker changed, so it fails.
func TestPublisherStalledAcrossACancelDoesNotPublish(t *testing.T) {
	const w = sec / 10
	g := NewGeometry(w, 10, true, false)
	r := g.New(t0, 0, "k")
	x := t0 / w
	res := g.Acquire(r, x*w, 6, 10)
	require.True(t, res.Allowed)
	fired := false
	g.testHookWalked = func(e int64) {
		if fired || e != x+1 {
			return
		}
		fired = true
		ok, _ := g.Cancel(r, res.Epoch, 6)
		require.True(t, ok)
	}
	p := g.Acquire(r, (x+1)*w, 1, 10) // walks (6 in), then Cancel, then publishes
	require.True(t, fired)
	require.True(t, p.Allowed)
	g.testHookWalked = nil
	full, _ := cacheWords(g, r)
	require.NotEqual(t, pack.Word(pack.TagOf(x+1), 6), full, "the stalled walk's over-count was not published")
	require.True(t, g.Acquire(r, (x+1)*w, 9, 10).Allowed)
}

// Cancel in the key's current sub-window writes no marker: a marker tagged
// with the current epoch would be read as the cache by every writer there,
// and refuse them all.
func TestCancelInTheCurrentSubWindowKeepsTheCache(t *testing.T) {
	const w = sec / 10
	g := NewGeometry(w, 10, false, false) // Strict: one cache word
	r := g.New(t0, 0, "k")
	x := t0 / w
	require.True(t, g.Acquire(r, x*w, 2, 10).Allowed)
	res := g.Acquire(r, (x+1)*w, 3, 10) // walks at x+1: caches 2
	require.True(t, res.Allowed)
	before, _ := cacheWords(g, r)
	ok, _ := g.Cancel(r, res.Epoch, 3)
	require.True(t, ok)
	after, _ := cacheWords(g, r)
	require.Equal(t, before, after)
	require.True(t, g.Acquire(r, (x+1)*w, 8, 10).Allowed)
	require.False(t, g.Acquire(r, (x+1)*w, 1, 10).Allowed)
}

// Cancel never below zero, never on another tag, never on a retired ring.
func TestCancelGuards(t *testing.T) {
	const w = sec / 10
	g := NewGeometry(w, 2, true, false)
	r := g.New(t0, 0, "k")
	x := t0 / w
	res := g.Acquire(r, x*w, 2, 10)
	ok, _ := g.Cancel(r, res.Epoch, 3)
	require.False(t, ok, "more than the slot holds")
	ok, _ = g.Cancel(r, res.Epoch+1, 1)
	require.False(t, ok, "an epoch after the key's newest")
	require.True(t, g.Acquire(r, (x+3)*w, 1, 10).Allowed) // same slot index, next tag
	ok, _ = g.Cancel(r, res.Epoch, 2)
	require.False(t, ok, "the sub-window left the window")
	require.Equal(t, int64(9), g.Peek(r, (x+3)*w, 0, 10).Remaining)
	require.True(t, g.Retire(r, (x+100)*w))
	ok, dead := g.Cancel(r, x+3, 1)
	require.False(t, ok)
	require.True(t, dead)
}
