package shard

import (
	"strconv"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/ringslot"
)

// hinted counts, per ring, the cells of the table that hold it.
func hinted(tab *Table) map[unsafe.Pointer]int {
	n := map[unsafe.Pointer]int{}
	for i := range tab.shards {
		c := tab.shards[i].hints.Load()
		if c == nil {
			continue
		}
		for j := range c.sets {
			for k := range c.sets[j] {
				if p := atomic.LoadPointer(&c.sets[j][k]); p != nil {
					n[ringOfCell(p).Pointer()]++
				}
			}
		}
	}
	return n
}

// cellsHolding counts the cells of the table that hold r.
func cellsHolding(tab *Table, r ringslot.Ring) int { return hinted(tab)[r.Pointer()] }

// requireLoadsMatchMap checks that Load finds every key, and finds the ring
// the map holds (LoadLocked reads the map alone, under the bucket lock).
func requireLoadsMatchMap(t *testing.T, tab *Table, g *ringslot.Geometry, keys []string) {
	t.Helper()
	for _, k := range keys {
		h := tab.Hash(k)
		want, ok := tab.LoadLocked(h, k)
		require.True(t, ok, k)
		got, ok := tab.Load(h, k)
		require.True(t, ok, k)
		require.True(t, got == want, "Load(%q) returned a ring the map does not hold", k)
		require.Equal(t, k, g.Key(got))
	}
}

// tagOf never returns 0, the tag of an empty cell, and always fits the
// pointer bits it borrows.
func TestHintTagIsNeverZero(t *testing.T) {
	for b := uint64(0); b < 1<<tagBits; b++ {
		tag := tagOf(b << tagShift)
		require.NotZero(t, tag, "bits %d", b)
		require.Less(t, tag, uintptr(1<<tagBits), "bits %d", b)
		if b != 0 {
			require.Equal(t, uintptr(b), tag, "bits %d: only 0 is remapped", b)
		}
	}
}

// As a shard grows from its first two sets to thousands, the hints grow
// with it (one cell per key at least), and every Load still returns the
// ring the map holds.
func TestHintsGrowWithTheKeys(t *testing.T) {
	tab, g := newTable(0)
	var keys []string
	for i := range 20_000 {
		k := "k" + strconv.Itoa(i)
		keys = append(keys, k)
		_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0))
		require.NoError(t, err)
	}
	for i := range tab.shards {
		s := &tab.shards[i]
		require.GreaterOrEqual(t, int64(numSets(s)*hintWays), s.keys.Load(), "shard %d", i)
	}
	requireLoadsMatchMap(t, tab, g, keys)
	// Each grow moved the hints into their new sets: after one Load of
	// every key, nearly all are hinted (a set takes hintWays; at one key
	// per cell, a few per cent of the keys find their set full).
	cells, n := hinted(tab), 0
	for _, k := range keys {
		r, _ := tab.LoadLocked(tab.Hash(k), k)
		require.LessOrEqual(t, cells[r.Pointer()], 1, "%s hinted twice", k)
		n += cells[r.Pointer()]
	}
	require.Greater(t, n, len(keys)*80/100, "hinted keys")
}

// A hint never outlives its ring's place in the map: once the ring is
// retired, Load answers from the map (the retired ring until it is
// replaced, then its replacement), and the replacement takes over the
// cell.
func TestHintOfARetiredRingIsNotUsed(t *testing.T) {
	tab, g := newTable(0)
	h := tab.Hash("a")
	a, err := tab.LoadOrCreate(h, "a", freshAt(g, t0))
	require.NoError(t, err)
	got, _ := tab.Load(h, "a")
	require.True(t, got == a)
	require.Equal(t, 1, cellsHolding(tab, a))

	require.True(t, g.Retire(a, t0+5*sec))
	got, ok := tab.Load(h, "a")
	require.True(t, ok)
	require.True(t, got == a, "the map still holds the retired ring")
	b, err := tab.Replace(h, "a", a, freshAt(g, t0+5*sec))
	require.NoError(t, err)
	got, _ = tab.Load(h, "a")
	require.True(t, got == b, "Load returned the retired ring after its replacement")
	require.Equal(t, 0, cellsHolding(tab, a), "the replaced ring is still hinted")
	require.Equal(t, 1, cellsHolding(tab, b))

	// A Load that read a from the map before the Replace remembers it
	// after: the cell names the retired ring, which Load must pass over.
	s := tab.shardOf(h)
	s.forget(h, b)
	s.remember(h, a)
	require.Equal(t, 1, cellsHolding(tab, a))
	got, _ = tab.Load(h, "a")
	require.True(t, got == b, "Load returned a retired ring from its cell")
}

// When more keys share a set than it has cells, and even share the tag
// (every hash equal: the table's fallback holds all but one key), the keys
// without a cell are found in the map, and no key is ever given another's
// ring.
func TestHintsOverflowToTheMap(t *testing.T) {
	tab, g := collidingTable(0)
	var keys []string
	for i := range 5 * hintWays {
		k := "c" + strconv.Itoa(i)
		keys = append(keys, k)
		_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0))
		require.NoError(t, err)
	}
	for range 3 { // every Load may try to remember its key
		requireLoadsMatchMap(t, tab, g, keys)
	}
}

// numSets returns the sets of s's hints, 0 without hints.
func numSets(s *shard) int {
	if c := s.hints.Load(); c != nil {
		return len(c.sets)
	}
	return 0
}

// A shard keeps no hints until it holds hintsFrom keys (the map alone is
// faster while it stays in the caches), starts them then, and drops them
// when its keys fall below half of that.
func TestHintsStartAtHintsFromKeys(t *testing.T) {
	g := ringslot.NewGeometry(sec/10, 10, true, false)
	tab := New(g, 1, 0)
	s := &tab.shards[0]
	var keys []string
	for i := range hintsFrom - 1 {
		k := "s" + strconv.Itoa(i)
		keys = append(keys, k)
		_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0))
		require.NoError(t, err)
	}
	require.Nil(t, s.hints.Load(), "hints below hintsFrom keys")
	requireLoadsMatchMap(t, tab, g, keys)
	for i := hintsFrom - 1; i < 2*hintsFrom; i++ {
		k := "s" + strconv.Itoa(i)
		keys = append(keys, k)
		_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0+9*sec*int64(i%2))) // every other key stays live at the sweep below
		require.NoError(t, err)
	}
	require.NotNil(t, s.hints.Load(), "no hints at %d keys", len(keys))
	requireLoadsMatchMap(t, tab, g, keys)
	require.NotEmpty(t, hinted(tab))

	// The first hintsFrom−1 keys and the later ones of even i go; 513
	// stay, one more than half of hintsFrom, so the hints stay too.
	require.Equal(t, hintsFrom-1+hintsFrom/2, tab.SweepShard(0, t0+10*sec))
	require.NotNil(t, s.hints.Load(), "hints dropped at %d keys", s.keys.Load())
	var live []string
	for i, k := range keys {
		if i >= hintsFrom-1 && i%2 == 1 {
			live = append(live, k)
		}
	}
	requireLoadsMatchMap(t, tab, g, live)
	require.Equal(t, len(live), tab.SweepShard(0, t0+30*sec))
	require.Nil(t, s.hints.Load(), "hints kept with no key")
}

// A table whose hints are disabled keeps none at any size, and finds every
// key through the map.
func TestDisabledHintsStayOff(t *testing.T) {
	g := ringslot.NewGeometry(sec/10, 10, true, false)
	tab := New(g, 1, 0)
	tab.DisableHints()
	var keys []string
	for i := range 3 * hintsFrom {
		k := "d" + strconv.Itoa(i)
		keys = append(keys, k)
		_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0))
		require.NoError(t, err)
	}
	requireLoadsMatchMap(t, tab, g, keys)
	require.Nil(t, tab.shards[0].hints.Load())
}

// BenchmarkHintCoverage reports, for a table of 16 shards (the engine's
// default on this machine's 2 CPUs) with the hints on, the share of keys
// hinted after every key was created and then loaded once, and the cells
// per key; docs/benchmarks.md quotes it:
//
//	go test -run '^$' -bench HintCoverage -benchtime 1x ./shard/
func BenchmarkHintCoverage(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "tenant-" + strconv.Itoa(i)
			}
			var share, perKey float64
			for b.Loop() {
				g := ringslot.NewGeometry(sec/10, 10, true, false)
				tab := New(g, 16, 0)
				for _, k := range keys {
					if _, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0)); err != nil {
						b.Fatal(err)
					}
				}
				for _, k := range keys {
					tab.Load(tab.Hash(k), k)
				}
				cells, hit := hinted(tab), 0
				for _, k := range keys {
					r, _ := tab.LoadLocked(tab.Hash(k), k)
					hit += min(cells[r.Pointer()], 1)
				}
				sets := 0
				for i := range tab.shards {
					sets += numSets(&tab.shards[i])
				}
				share, perKey = 100*float64(hit)/float64(n), float64(sets*hintWays)/float64(n)
			}
			b.ReportMetric(share, "%hinted")
			b.ReportMetric(perKey, "cells/key")
		})
	}
}
