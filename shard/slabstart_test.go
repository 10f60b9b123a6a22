package shard

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A table starts its first slab when slabFrom keys are present, sized for
// them; until then every key gets a state of its own and is found through
// the map alone. A sweep that leaves fewer than half of slabFrom drops the
// slabs, and every key left, in a slab or not, is still found; the next
// slab starts when slabFrom keys are present again.
func TestSlabStartsAtSlabFrom(t *testing.T) {
	const from = 100
	tab, g := newTable(0)
	tab.SlabFrom(from)
	create := func(k string, at int64) {
		t.Helper()
		_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, at))
		require.NoError(t, err)
	}
	found := func(keys []string) {
		t.Helper()
		for _, k := range keys {
			r, ok := tab.Load(tab.Hash(k), k)
			require.True(t, ok, k)
			require.True(t, g.HasKey(r, k), k)
		}
	}

	var keys []string
	for i := range from - 1 {
		keys = append(keys, "a"+strconv.Itoa(i))
		create(keys[i], t0)
	}
	require.Nil(t, tab.gens.Load(), "a slab started below slabFrom keys")
	keys = append(keys, "a"+strconv.Itoa(from-1))
	create(keys[from-1], t0)
	gens := tab.gens.Load()
	require.NotNil(t, gens, "no slab at slabFrom keys")
	require.Equal(t, uint64(tab.slabSlots(from)), gens.cur.mask+1)
	for _, k := range keys {
		r, _ := tab.Load(tab.Hash(k), k)
		require.False(t, inSlab(tab, r), "%s: created before the slab, but in it", k)
	}
	for i := range 20 {
		k := "b" + strconv.Itoa(i)
		keys = append(keys, k)
		create(k, t0+2*sec) // the "b" keys outlive the sweep below
	}
	found(keys)
	inSlabNow := 0
	for _, k := range keys[from:] {
		if r, _ := tab.Load(tab.Hash(k), k); inSlab(tab, r) {
			inSlabNow++
		}
	}
	require.Positive(t, inSlabNow, "no key created after the slab started is in it")

	for i := range tab.Shards() {
		tab.SweepShard(i, t0+sec+sec/2) // the "a" keys are idle, the "b" keys not
	}
	require.Equal(t, int64(20), tab.Len())
	require.Nil(t, tab.gens.Load(), "20 keys left of slabFrom 100, but the slabs were kept")
	found(keys[from:])

	for i := range from - 20 {
		create("c"+strconv.Itoa(i), t0+2*sec)
	}
	require.NotNil(t, tab.gens.Load(), "no slab at slabFrom keys after the sweep")
	found(keys[from:])
}
