package shard

import (
	"runtime"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/ringslot"
)

// A Load that read a key's ring from the map just before a sweep retired
// and deleted it remembers that ring after the sweep has cleared its cell
// (the interleaving below, forced step by step). The cell then holds a
// reclaimed ring. Load must not let it stand in front of the key's next
// ring for good, and the hints must not keep the reclaimed state from the
// collector for good: docs/design.md §5 promises it is kept only "until the
// cell is reused".
//
// Known break (the hints as of 0e57201): hint returns at the first cell
// whose key matches, so the retired ring in the set's first cell makes every
// later Load of the key miss and go to the map, though its live ring sits in
// the next cell; and no code path ever clears or reuses a cell that holds a
// retired ring (remember takes only empty cells, rehint copies every cell,
// forget clears only the ring it deletes), so the reclaimed state, its key
// and (SlidingLog) its whole log stay reachable for the engine's lifetime,
// one per such race, in every set where one happened.
func TestStaleHintGivesWayAndIsCollected(t *testing.T) {
	t.Skip("known break: a retired ring remembered by a Load racing its sweep shadows the key's live ring in its set and is never cleared (shard/hints.go)")
	tab, g := newTable(0)
	h := tab.Hash("a")
	s := tab.shardOf(h)
	a, err := tab.LoadOrCreate(h, "a", freshAt(g, t0))
	require.NoError(t, err)
	gone := weak.Make((*byte)(a.Pointer()))

	// Load: the hint is cleared by another goroutine's sweep before this
	// Load runs, so it reads a from the map ...
	s.forget(h, a)
	got, ok := s.m.Load(h)
	require.True(t, ok)
	require.True(t, got == a)
	// ... the sweep retires a, deletes it and clears its cell (none now)
	// ...
	n := 0
	for i := range tab.shards {
		n += tab.SweepShard(i, t0+10*sec)
	}
	require.Equal(t, 1, n)
	// ... and the Load remembers what it read.
	s.remember(h, got)
	require.Equal(t, 1, cellsHolding(tab, a))

	// The key comes back: a new ring, remembered after the stale cell.
	b, err := tab.LoadOrCreate(h, "a", freshAt(g, t0+10*sec))
	require.NoError(t, err)
	require.True(t, b != a)
	if r, ok := tab.hint(s, h, "a"); !ok || r != b {
		t.Errorf("the hints do not answer for the live ring: the retired one in front of it shadows it, so every Load of the key misses")
	}

	// The key goes idle again and is swept; nothing holds a any more but
	// the stale cell.
	n = 0
	for i := range tab.shards {
		n += tab.SweepShard(i, t0+20*sec)
	}
	require.Equal(t, 1, n)
	stale := len(hinted(tab)) // no key is present: every hinted ring is a reclaimed one
	a, b, got = ringslot.Ring{}, ringslot.Ring{}, ringslot.Ring{}
	runtime.GC()
	runtime.GC()
	if gone.Value() != nil || stale != 0 {
		t.Errorf("with no key left, %d cells still hold reclaimed rings (the first state still reachable: %v)", stale, gone.Value() != nil)
	}
	runtime.KeepAlive(tab) // the engine's table lives as long as the engine
}
