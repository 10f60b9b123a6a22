package shard

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/ringslot"
)

// Reclaiming a key clears its cell, so the hints keep no reclaimed state
// from the collector; Load then misses, and a new ring for the key is
// hinted in its turn.
func TestSweepClearsTheHint(t *testing.T) {
	tab, g := newTable(0)
	h := tab.Hash("a")
	a, err := tab.LoadOrCreate(h, "a", freshAt(g, t0))
	require.NoError(t, err)
	require.Equal(t, 1, cellsHolding(tab, a))
	n := 0
	for i := range tab.shards {
		n += tab.SweepShard(i, t0+10*sec)
	}
	require.Equal(t, 1, n)
	require.Equal(t, 0, cellsHolding(tab, a))
	_, ok := tab.Load(h, "a")
	require.False(t, ok)
	b, err := tab.LoadOrCreate(h, "a", freshAt(g, t0+10*sec))
	require.NoError(t, err)
	require.True(t, b != a)
	got, _ := tab.Load(h, "a")
	require.True(t, got == b)
}

// Sweeping most keys away shrinks the hints back (to a quarter full at
// most), and the keys left are all still found.
func TestHintsShrinkAfterReclamation(t *testing.T) {
	tab, g := newTable(0)
	var old, keep []string
	for i := range 8_000 {
		k := "k" + strconv.Itoa(i)
		at := t0
		if i%100 == 0 {
			keep, at = append(keep, k), t0+9*sec // still in the window at the sweep
		} else {
			old = append(old, k)
		}
		_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, at))
		require.NoError(t, err)
	}
	var before int
	for i := range tab.shards {
		before += numSets(&tab.shards[i])
	}
	n := 0
	for i := range tab.shards {
		n += tab.SweepShard(i, t0+10*sec)
	}
	require.Equal(t, len(old), n)
	var after int
	for i := range tab.shards {
		s := &tab.shards[i]
		sets := numSets(s)
		after += sets
		require.True(t, sets <= minHints || s.keys.Load() >= int64(sets*hintWays/4), "shard %d: %d keys in %d sets", i, s.keys.Load(), sets)
	}
	require.Less(t, after, before/8)
	requireLoadsMatchMap(t, tab, g, keep)
	for _, k := range old {
		_, ok := tab.Load(tab.Hash(k), k)
		require.False(t, ok, k)
	}
}

// Loads racing with retirements, replacements, reclamation and new keys
// never return another key's ring, and once the writers stop every Load
// returns the ring the map holds.
func TestHintsUnderChurn(t *testing.T) {
	tab, g := newTable(0)
	const nkeys = 512
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "u" + strconv.Itoa(i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i += 7 {
				select {
				case <-stop:
					return
				default:
				}
				k := keys[i%nkeys]
				h := tab.Hash(k)
				r, err := tab.LoadOrCreate(h, k, freshAt(g, t0))
				if err != nil || g.Key(r) != k {
					errs <- "LoadOrCreate(" + k + ") returned another key's ring"
					return
				}
				if r, ok := tab.Load(h, k); ok && g.Key(r) != k {
					errs <- "Load(" + k + ") returned another key's ring"
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // retire and replace, or reclaim
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := keys[(i*13)%nkeys]
			h := tab.Hash(k)
			if r, ok := tab.Load(h, k); ok && g.Retire(r, t0+5*sec) {
				if i%2 == 0 {
					_, _ = tab.Replace(h, k, r, freshAt(g, t0))
				} else {
					tab.SweepShard(int(h>>tab.shift), t0+5*sec)
				}
			}
		}
	}()
	for i := 0; i < 20_000; i++ {
		k := keys[(i*31)%nkeys]
		if r, ok := tab.Load(tab.Hash(k), k); ok && g.Key(r) != k {
			t.Fatalf("Load(%q) returned the ring of %q", k, g.Key(r))
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	for _, k := range keys { // the sweeps may have reclaimed any of them
		_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0))
		require.NoError(t, err)
	}
	requireLoadsMatchMap(t, tab, g, keys)
}

// rememberAfterSweep forces the one way a cell comes to hold a reclaimed
// ring: a Load misses the hints and reads a from the map, a sweep then
// retires and deletes a and clears its cell, and the Load remembers what it
// read.
func rememberAfterSweep(t *testing.T, tab *Table, h uint64, a ringslot.Ring, at int64) {
	t.Helper()
	s := tab.shardOf(h)
	s.forget(h, a) // the hint is gone, so the Load reads the map ...
	got, ok := s.m.Load(h)
	require.True(t, ok)
	require.True(t, got == a)
	n := 0
	for i := range tab.shards { // ... the sweep deletes a ...
		n += tab.sweepMaps(i, at)
	}
	require.Equal(t, 1, n)
	require.True(t, tab.geo.Retired(a))
	s.remember(h, got) // ... and the Load remembers it
	require.Equal(t, 1, cellsHolding(tab, a))
}

// A cell that holds a reclaimed ring (a Load racing the sweep that deleted
// it) gives way to the key's next ring: the key's next Load frees it and
// finds the live ring, hinted. Before the fix, the retired ring in front
// stopped every Load of the key at it (each went to the map), and nothing
// ever cleared the cell, so the state, its key and a log's whole buffer
// stayed reachable for the engine's lifetime.
func TestStaleHintGivesWayToTheKeysNextRing(t *testing.T) {
	tab, g := newTable(0)
	h := tab.Hash("a")
	a, err := tab.LoadOrCreate(h, "a", freshAt(g, t0))
	require.NoError(t, err)
	gone := weak.Make((*byte)(a.Pointer()))
	rememberAfterSweep(t, tab, h, a, t0+10*sec)

	b, err := tab.LoadOrCreate(h, "a", freshAt(g, t0+10*sec))
	require.NoError(t, err)
	require.True(t, b != a)
	got, ok := tab.Load(h, "a")
	require.True(t, ok)
	require.True(t, got == b)
	require.Equal(t, 0, cellsHolding(tab, a), "the reclaimed ring still holds a cell")
	require.Equal(t, 1, cellsHolding(tab, b), "the live ring is not hinted")

	a, got = ringslot.Ring{}, ringslot.Ring{}
	runtime.GC()
	runtime.GC()
	require.Nil(t, gone.Value(), "the reclaimed state is still reachable")
	runtime.KeepAlive(tab)
}

// A cell that holds a reclaimed ring whose key never comes back is freed
// by the shard's next sweep, and the state is collected.
func TestSweepScrubsStaleHints(t *testing.T) {
	tab, g := newTable(0)
	h := tab.Hash("a")
	a, err := tab.LoadOrCreate(h, "a", freshAt(g, t0))
	require.NoError(t, err)
	gone := weak.Make((*byte)(a.Pointer()))
	rememberAfterSweep(t, tab, h, a, t0+10*sec)
	a = ringslot.Ring{}

	for i := range tab.shards {
		require.Equal(t, 0, tab.SweepShard(i, t0+20*sec))
	}
	require.Empty(t, hinted(tab), "no key is present, yet cells hold rings")
	runtime.GC()
	runtime.GC()
	require.Nil(t, gone.Value(), "the reclaimed state is still reachable")
	runtime.KeepAlive(tab)
}
