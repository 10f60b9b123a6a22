package shard

import (
	"math/bits"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/ringslot"
)

// growToThreeSlabs creates keys "k0" … until the table has three slabs
// and a few keys in the newest, and returns them.
func growToThreeSlabs(t *testing.T, tab *Table, fresh Fresh) []string {
	var keys []string
	for i := 0; ; i++ {
		if g := tab.gens.Load(); g != nil && g.old != nil && g.cur.claim.Load() >= 8 {
			return keys
		}
		require.Less(t, i, 1_000_000, "no third slab")
		k := "k" + strconv.Itoa(i)
		_, err := tab.LoadOrCreate(tab.Hash(k), k, fresh)
		require.NoError(t, err)
		keys = append(keys, k)
	}
}

// inOne reports whether r's state is in slab a.
func inOne(a *slab, r ringslot.Ring) bool { return a != nil && inSlabs([]*slab{a}, r) }

// Load finds a key's ring in any of the three newest slabs without the
// map: with the key's map entry taken away (white-box), Load still
// returns its ring from the slab.
func TestSlabLoadProbesThreeSlabs(t *testing.T) {
	if slabChurn {
		t.Skip("tiny slabs: a third slab may hold no key")
	}
	tab, g := newTable(0)
	keys := growToThreeSlabs(t, tab, freshAt(g, t0))
	gens := tab.gens.Load()
	found := map[*slab]int{}
	for _, k := range keys {
		h := tab.Hash(k)
		r, ok := tab.Load(h, k)
		require.True(t, ok, k)
		var in *slab
		for _, a := range []*slab{gens.cur, gens.prev, gens.old} {
			if inOne(a, r) {
				in = a
			}
		}
		if in == nil {
			continue // in a state of its own
		}
		s := tab.shardOf(h)
		s.m.Delete(h) // the map no longer knows the key
		r2, ok := tab.Load(h, k)
		require.True(t, ok, "%s: a ring in a probed slab not found without the map", k)
		require.True(t, r2 == r, k)
		s.m.Store(h, r)
		found[in]++
	}
	require.Positive(t, found[gens.old], "no key found in the third slab")
	require.Positive(t, found[gens.prev], "no key found in the second slab")
	require.Positive(t, found[gens.cur], "no key found in the newest slab")
}

// A key whose two slots in the newest slab are both taken gets one of
// its slots in the slab before, when one is free there, rather than a
// state of its own.
func TestSlabNewKeyOverflowsIntoThePreviousSlab(t *testing.T) {
	if slabChurn {
		t.Skip("tiny slabs filled to the last slot: the previous slab is full")
	}
	tab, g := newTable(0)
	fresh := freshAt(g, t0)
	growToThreeSlabs(t, tab, fresh)
	gens := tab.gens.Load()
	for i := 0; gens.cur.claim.Load() < gens.cur.fill/2; i++ { // the newest half full
		k := "y" + strconv.Itoa(i)
		_, err := tab.LoadOrCreate(tab.Hash(k), k, fresh)
		require.NoError(t, err)
	}
	taken := func(a *slab, i uint64) bool { return a.taken[i/64].Load()&(1<<(i%64)) != 0 }
	both := func(a *slab, h uint64) bool {
		return taken(a, h&a.mask) && taken(a, bits.RotateLeft64(h, 32)&a.mask)
	}
	overflowed := 0
	for i := 0; overflowed < 3; i++ {
		require.Less(t, i, 100_000, "no key overflowed")
		k := "x" + strconv.Itoa(i)
		h := tab.Hash(k)
		if !both(gens.cur, h) || both(gens.prev, h) {
			continue
		}
		r, err := tab.LoadOrCreate(h, k, fresh)
		require.NoError(t, err)
		require.Same(t, gens, tab.gens.Load(), "a new slab started")
		require.True(t, inOne(gens.prev, r), "%s: both slots in the newest slab taken, one free in the previous, but the ring is not there", k)
		r2, ok := tab.Load(h, k)
		require.True(t, ok && r2 == r, k)
		overflowed++
	}
}
