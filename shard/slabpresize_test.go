package shard

import (
	"strconv"
	"testing"

	"github.com/ringlimit/ringlimit/ringslot"
	"github.com/stretchr/testify/require"
)

// A presized table that grew past its count and is then swept down, and
// one whose keys churn (swept and replaced by new ones, round after
// round, through many generations), never hold a newest slab sized for
// fewer than the presized keys, never drop their slabs, and find every
// key present after each round.
func TestPresizedSlabNeverSmaller(t *testing.T) {
	const n = 300
	g := ringslot.NewGeometry(sec/10, 10, true, false)
	tab := New(g, 4, 0)
	tab.Presize(n)
	home := tab.gens.Load().cur.mask + 1
	check := func(round int, keys []string) {
		t.Helper()
		gens := tab.gens.Load()
		require.NotNil(t, gens, "round %d: the slabs were dropped", round)
		require.GreaterOrEqual(t, gens.cur.mask+1, home, "round %d: a slab sized for fewer than the presized keys", round)
		for _, k := range keys {
			r, ok := tab.Load(tab.Hash(k), k)
			require.True(t, ok && g.HasKey(r, k), "round %d: key %q lost", round, k)
		}
		require.Equal(t, int64(len(keys)), tab.Len(), "round %d", round)
	}
	now := t0
	for round := range 40 {
		count := n / 3 // churn below the presized count
		if round%10 == 9 {
			count = 5 * n // and now and then far past it
		}
		var keys []string
		for i := range count {
			k := strconv.Itoa(round) + "/" + strconv.Itoa(i)
			keys = append(keys, k)
			_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, now))
			require.NoError(t, err)
		}
		check(round, keys)
		now += 10 * sec // every key idle
		for i := range tab.Shards() {
			tab.SweepShard(i, now)
		}
		check(round, nil)
	}
}
