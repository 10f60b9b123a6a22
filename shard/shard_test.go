package shard

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/ringslot"
)

const (
	sec = int64(1e9)
	t0  = 1_700_000_000 * sec
)

// newTable returns a table of 4 shards; its keys live in its slab, which
// it starts at its first key.
func newTable(maxKeys int64) (*Table, *ringslot.Geometry) {
	g := ringslot.NewGeometry(sec/10, 10, true, false)
	tab := New(g, 4, maxKeys)
	tab.SlabFrom(0)
	return tab, g
}

// Two keys whose hashes collide completely still get separate rings: the
// map compares the full key.
func TestHashCollisionNeverSharesACount(t *testing.T) {
	tab, g := newTable(0)
	const h = 0xdeadbeef
	fresh := func(floor int64, _ string) (int64, int64) { return max(t0, floor), 0 }
	a, err := tab.LoadOrCreate(h, "alice", fresh)
	require.NoError(t, err)
	b, err := tab.LoadOrCreate(h, "bob", fresh)
	require.NoError(t, err)
	require.True(t, a != b, "two keys share one ring")
	require.True(t, g.Acquire(a, t0, 5, 5).Allowed)
	require.True(t, g.Acquire(b, t0, 5, 5).Allowed, "bob must not see alice's count")
	got, ok := tab.Load(h, "alice")
	require.True(t, ok)
	require.True(t, a == got)
	_, ok = tab.Load(h, "carol")
	require.False(t, ok)
	require.Equal(t, int64(2), tab.Len())
}

func TestMaxKeysAndReplace(t *testing.T) {
	tab, g := newTable(2)
	fresh := func(floor int64, _ string) (int64, int64) { return max(t0, floor), 0 }
	a, err := tab.LoadOrCreate(tab.Hash("a"), "a", fresh)
	require.NoError(t, err)
	_, err = tab.LoadOrCreate(tab.Hash("b"), "b", fresh)
	require.NoError(t, err)
	_, err = tab.LoadOrCreate(tab.Hash("c"), "c", fresh)
	require.ErrorIs(t, err, ErrFull)
	require.Equal(t, int64(1), tab.Refused())

	// Replacing a retired ring reuses its place: no MaxKeys check fails.
	require.True(t, g.Retire(a, t0+2*sec))
	a2, err := tab.Replace(tab.Hash("a"), "a", a, fresh)
	require.NoError(t, err)
	require.True(t, a != a2, "the retired ring was not replaced")
	// A second Replace of the same old ring returns the new one.
	a3, err := tab.Replace(tab.Hash("a"), "a", a, fresh)
	require.NoError(t, err)
	require.True(t, a2 == a3, "a second Replace must return the current ring")
	require.Equal(t, int64(2), tab.Len())
	require.Equal(t, int64(1), tab.Evicted())
}

func TestSweepShardReclaimsIdleAndKeepsLive(t *testing.T) {
	tab, g := newTable(0)
	fresh := func(floor int64, _ string) (int64, int64) { return max(t0, floor), 0 }
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, k := range keys {
		r, err := tab.LoadOrCreate(tab.Hash(k), k, fresh)
		require.NoError(t, err)
		require.True(t, g.Acquire(r, t0, 1, 10).Allowed)
	}
	live, _ := tab.Load(tab.Hash("c"), "c")
	require.True(t, g.Acquire(live, t0+sec, 1, 10).Allowed)
	n := 0
	for i := 0; i < tab.Shards(); i++ {
		n += tab.SweepShard(i, t0+sec+2*sec/10)
	}
	require.Equal(t, len(keys)-1, n)
	require.Equal(t, int64(1), tab.Len())
	_, ok := tab.Load(tab.Hash("c"), "c")
	require.True(t, ok)
}

// Swap moves a key to a new ring under the bucket lock: only while the old
// ring is current, without counting an eviction, and never creating a key.
func TestSwap(t *testing.T) {
	tab, g := newTable(0)
	fresh := func(floor int64, _ string) (int64, int64) { return max(t0, floor), 0 }
	h := tab.Hash("a")
	a, err := tab.LoadOrCreate(h, "a", fresh)
	require.NoError(t, err)
	b := g.New(t0, 0, "a")
	got, ok := tab.Swap(h, "a", a, func() ringslot.Ring { return b })
	require.True(t, ok)
	require.True(t, got == b)
	// old is no longer current: next is not called, the current ring is
	// returned.
	got, ok = tab.Swap(h, "a", a, func() ringslot.Ring { panic("next called for a stale ring") })
	require.True(t, ok)
	require.True(t, got == b)
	cur, _ := tab.Load(h, "a")
	require.True(t, cur == b)
	// An absent key stays absent.
	_, ok = tab.Swap(tab.Hash("z"), "z", a, func() ringslot.Ring { panic("next called for an absent key") })
	require.False(t, ok)
	_, ok = tab.Load(tab.Hash("z"), "z")
	require.False(t, ok)
	require.Equal(t, int64(1), tab.Len())
	require.Zero(t, tab.Evicted())
}

// next runs under the key's bucket lock: a Replace of the same old ring,
// started from inside next, cannot finish until the swap is installed, and
// then finds the new ring rather than replacing old with an empty one.
func TestSwapHoldsTheBucketLockDuringNext(t *testing.T) {
	tab, g := newTable(0)
	fresh := func(floor int64, _ string) (int64, int64) { return max(t0, floor), 0 }
	h := tab.Hash("a")
	old, err := tab.LoadOrCreate(h, "a", fresh)
	require.NoError(t, err)
	moved := g.New(t0, 0, "a")
	replaced := make(chan ringslot.Ring, 1)
	var finished atomic.Bool
	early := false
	got, ok := tab.Swap(h, "a", old, func() ringslot.Ring {
		go func() {
			r, _ := tab.Replace(h, "a", old, fresh)
			finished.Store(true)
			replaced <- r
		}()
		for i := 0; i < 1000 && !early; i++ { // give the Replace every chance to run
			runtime.Gosched()
			early = finished.Load()
		}
		return moved
	})
	require.False(t, early, "Replace ran while Swap's next held the key")
	require.True(t, ok)
	require.True(t, got == moved)
	require.True(t, <-replaced == moved, "Replace must find the moved ring")
	require.Zero(t, tab.Evicted())
}

// LoadLocked waits out a Swap in progress and returns the new ring, where
// the lock-free Load still returns the old one (what Engine's Cancel relies
// on to follow a log that Grow moved).
func TestLoadLockedWaitsForSwap(t *testing.T) {
	tab, g := newTable(0)
	fresh := func(floor int64, _ string) (int64, int64) { return max(t0, floor), 0 }
	h := tab.Hash("a")
	old, err := tab.LoadOrCreate(h, "a", fresh)
	require.NoError(t, err)
	moved := g.New(t0, 0, "a")
	locked := make(chan ringslot.Ring, 1)
	var finished atomic.Bool
	early := false
	var during ringslot.Ring
	tab.Swap(h, "a", old, func() ringslot.Ring {
		during, _ = tab.Load(h, "a")
		go func() {
			r, _ := tab.LoadLocked(h, "a")
			finished.Store(true)
			locked <- r
		}()
		for i := 0; i < 1000 && !early; i++ {
			runtime.Gosched()
			early = finished.Load()
		}
		return moved
	})
	require.False(t, early, "LoadLocked returned while Swap held the key")
	require.True(t, during == old, "the lock-free Load sees the old ring during the swap")
	require.True(t, <-locked == moved, "LoadLocked returns the ring Swap installed")
	r, ok := tab.LoadLocked(tab.Hash("absent"), "absent")
	require.False(t, ok)
	require.False(t, r.Valid())
	require.Equal(t, int64(1), tab.Len(), "LoadLocked creates nothing")
}

// Len never reads above MaxKeys, even while many goroutines race to create
// keys at the cap (reserve is a CAS loop, not add-then-undo).
func TestLenNeverAboveMaxKeys(t *testing.T) {
	const maxKeys = 8
	tab, _ := newTable(maxKeys)
	fresh := func(floor int64, _ string) (int64, int64) { return max(t0, floor), 0 }
	var stop atomic.Bool
	var over atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			if n := tab.Len(); n > maxKeys {
				over.Store(n)
			}
		}
	}()
	workers := 4 * runtime.GOMAXPROCS(0)
	finished := make(chan struct{}, workers)
	for w := range workers {
		go func() {
			for i := range 2000 {
				k := string(rune('a'+w)) + string(rune(i))
				_, _ = tab.LoadOrCreate(tab.Hash(k), k, fresh)
			}
			finished <- struct{}{}
		}()
	}
	for range workers {
		<-finished
	}
	stop.Store(true)
	<-done
	require.Zero(t, over.Load(), "Len read above MaxKeys")
	require.Equal(t, int64(maxKeys), tab.Len())
}

// collidingTable is a table whose keys all hash to 0: one resident in the
// primary map, every other key in the fallback.
func collidingTable(maxKeys int64) (*Table, *ringslot.Geometry) {
	tab, g := newTable(maxKeys)
	tab.ForceHashMask(0)
	return tab, g
}

func freshAt(g *ringslot.Geometry, t int64) Fresh {
	return func(floor int64, _ string) (int64, int64) { return max(t, floor), 0 }
}

// With every hash equal, each key still gets its own ring, found by Load
// and visited once by Range, and no two keys share a count.
func TestFullCollisionsKeepKeysApart(t *testing.T) {
	tab, g := collidingTable(0)
	const n = 40
	rings := map[string]ringslot.Ring{}
	for i := range n {
		k := "key-" + strconv.Itoa(i)
		r, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0))
		require.NoError(t, err)
		rings[k] = r
	}
	require.Equal(t, int64(n), tab.Len())
	for k, r := range rings {
		got, ok := tab.Load(0, k)
		require.True(t, ok, k)
		require.True(t, got == r, k)
		again, err := tab.LoadOrCreate(0, k, func(int64, string) (int64, int64) { panic("created twice") })
		require.NoError(t, err)
		require.True(t, again == r)
		require.True(t, g.Acquire(r, t0, 5, 5).Allowed, "%s sees another key's count", k)
		require.False(t, g.Acquire(r, t0, 1, 5).Allowed)
	}
	seen := map[string]int{}
	tab.Range(func(k string, r ringslot.Ring) bool {
		seen[k]++
		require.True(t, rings[k] == r)
		return true
	})
	require.Len(t, seen, n)
	for k, c := range seen {
		require.Equal(t, 1, c, k)
	}
	_, ok := tab.Load(0, "absent")
	require.False(t, ok)
}

// The resident is reclaimed while colliding keys live in the fallback: they
// stay reachable, a reclaimed fallback key leaves the primary as it was
// (absent stays absent: no empty ring is stored for the hash), and keys are
// created again in whichever map is free.
func TestFullCollisionsRemoveReplaceSwap(t *testing.T) {
	tab, g := collidingTable(0)
	for _, k := range []string{"a", "b", "c"} {
		_, err := tab.LoadOrCreate(0, k, freshAt(g, t0))
		require.NoError(t, err)
	}
	a, _ := tab.Load(0, "a")
	b, _ := tab.Load(0, "b")
	require.True(t, g.Acquire(b, t0, 1, 10).Allowed) // b stays live; a and c idle
	require.True(t, g.Acquire(b, t0+2*sec, 1, 10).Allowed)
	n := 0
	for i := range tab.Shards() {
		n += tab.SweepShard(i, t0+2*sec)
	}
	require.Equal(t, 2, n, "a (resident) and c (fallback) reclaimed")
	require.Equal(t, int64(1), tab.Len())
	_, ok := tab.Load(0, "a")
	require.False(t, ok)
	got, ok := tab.Load(0, "b")
	require.True(t, ok)
	require.True(t, got == b)
	// b, in the fallback, is retired and replaced there; then swapped.
	require.True(t, g.Retire(b, t0+5*sec))
	b2, err := tab.Replace(0, "b", b, freshAt(g, t0+5*sec))
	require.NoError(t, err)
	require.True(t, b2 != b)
	got, _ = tab.Load(0, "b")
	require.True(t, got == b2)
	b3 := g.New(t0+5*sec, 0, "b")
	got, ok = tab.Swap(0, "b", b2, func() ringslot.Ring {
		require.True(t, g.Retire(b2, t0+8*sec)) // Swap's contract: next retires old (idle since t0+5s)
		return b3
	})
	require.True(t, ok)
	require.True(t, got == b3)
	got, _ = tab.Load(0, "b")
	require.True(t, got == b3)
	// Reclaim b with the primary absent: it must stay absent.
	require.True(t, g.Retire(b3, t0+10*sec))
	n = 0
	for i := range tab.Shards() {
		n += tab.SweepShard(i, t0+10*sec)
	}
	require.Equal(t, 1, n)
	require.Zero(t, tab.Len())
	for _, k := range []string{"a", "b", "c", "d"} {
		_, ok := tab.Load(0, k) // a stored empty ring would crash here
		require.False(t, ok, k)
	}
	// a comes back as the resident, c into the fallback.
	a2, err := tab.LoadOrCreate(0, "a", freshAt(g, t0+10*sec))
	require.NoError(t, err)
	require.True(t, a2 != a)
	c2, err := tab.LoadOrCreate(0, "c", freshAt(g, t0+10*sec))
	require.NoError(t, err)
	got, _ = tab.Load(0, "a")
	require.True(t, got == a2)
	got, _ = tab.Load(0, "c")
	require.True(t, got == c2)
	require.Equal(t, int64(2), tab.Len())
	require.Equal(t, int64(4), tab.Evicted())
}

// MaxKeys counts keys in both maps.
func TestFullCollisionsMaxKeys(t *testing.T) {
	tab, g := collidingTable(2)
	_, err := tab.LoadOrCreate(0, "a", freshAt(g, t0))
	require.NoError(t, err)
	_, err = tab.LoadOrCreate(0, "b", freshAt(g, t0))
	require.NoError(t, err)
	_, err = tab.LoadOrCreate(0, "c", freshAt(g, t0))
	require.ErrorIs(t, err, ErrFull)
	require.Equal(t, int64(2), tab.Len())
}

// A shard's hot words fill exactly one cache line, on 64- and 32-bit
// platforms (make test's 386 run), so that two shards' counters never
// share one.
func TestShardIsOneCacheLine(t *testing.T) {
	require.Equal(t, uintptr(cacheLine), unsafe.Sizeof(shard{}))
}
