package shard

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/ringslot"
)

// inSlab reports whether r's state is in one of tab's slabs Load probes.
func inSlab(tab *Table, r ringslot.Ring) bool {
	return inSlabs(probedSlabs(tab.gens.Load()), r)
}

// inSlabs reports whether r's state is in one of slabs.
func inSlabs(slabs []*slab, r ringslot.Ring) bool {
	for _, a := range slabs {
		p, lo := uintptr(r.Pointer()), uintptr(a.base)
		if p >= lo && p < lo+uintptr(len(a.mem))*8 {
			return true
		}
	}
	return false
}

// slabKeys returns n distinct keys of length n%16+1 … (1 to 16 bytes, so
// that some exceed a 128-byte slot's 15), many sharing their first bytes.
func slabKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		k := fmt.Sprintf("%07d%s", i, strings.Repeat("x", 9))
		keys[i] = k[len(k)-(i%16+1):]
		if i%16 < 7 {
			keys[i] = fmt.Sprintf("%0*d", i%16+1, i)[:i%16+1]
		}
	}
	seen := map[string]bool{}
	out := keys[:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// Most keys of a table of a few thousand live in its slab, and Load finds
// every key's ring, in the slab or not, with its own key.
func TestSlabHoldsMostKeysAndLoadFindsAll(t *testing.T) {
	tab, g := newTable(0)
	fresh := freshAt(g, t0)
	keys := slabKeys(4000)
	rings := map[string]ringslot.Ring{}
	for _, k := range keys {
		r, err := tab.LoadOrCreate(tab.Hash(k), k, fresh)
		require.NoError(t, err)
		rings[k] = r
	}
	in := 0
	for _, k := range keys {
		r, ok := tab.Load(tab.Hash(k), k)
		require.True(t, ok, k)
		require.True(t, r == rings[k], k)
		require.Equal(t, k, g.Key(r))
		if inSlab(tab, r) {
			in++
			require.LessOrEqual(t, len(k), tab.slotKeyMax, "a key too long for a slot is in the slab")
		}
	}
	if !slabChurn { // whose slabs are full
		require.Greater(t, in, len(keys)/2, "the slab holds few keys")
	}
	for _, k := range []string{"", "y", "0000000", "0000000xxxxxxxx", "absent-key"} {
		_, ok := tab.Load(tab.Hash(k), k)
		require.False(t, ok, "%q", k)
	}
}

// A retired ring in a slot is never returned: Load finds the key's
// replacement, wherever it lives, and a ring out of the map is never
// found again.
func TestSlabNeverReturnsARetiredRing(t *testing.T) {
	tab, g := newTable(0)
	keys := slabKeys(300)
	for _, k := range keys {
		_, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0))
		require.NoError(t, err)
	}
	for _, k := range keys {
		h := tab.Hash(k)
		old, _ := tab.Load(h, k)
		require.True(t, g.Retire(old, t0+5*sec))
		nr, err := tab.Replace(h, k, old, freshAt(g, t0+5*sec))
		require.NoError(t, err)
		require.True(t, nr != old)
		got, ok := tab.Load(h, k)
		require.True(t, ok)
		require.True(t, got == nr, "%q: Load returned the retired ring", k)
	}
	n := 0
	for i := range tab.Shards() {
		n += tab.SweepShard(i, t0+60*sec)
	}
	require.Equal(t, len(keys), n)
	for _, k := range keys {
		_, ok := tab.Load(tab.Hash(k), k)
		require.False(t, ok, "%q: found after its sweep", k)
	}
}

// Every key shares its two slots with every other (all hashes are 0): one
// key holds each slot, the rest live on the heap, and all are found with
// their own rings, through a retirement and replacement of the slot holders.
func TestSlabSharedSlotsNeverConfuseKeys(t *testing.T) {
	tab, g := collidingTable(0)
	keys := slabKeys(40)
	for _, k := range keys {
		_, err := tab.LoadOrCreate(0, k, freshAt(g, t0))
		require.NoError(t, err)
	}
	for round := range 3 {
		at := t0 + int64(round+1)*10*sec
		for _, k := range keys {
			r, ok := tab.Load(0, k)
			require.True(t, ok)
			require.Equal(t, k, g.Key(r))
			require.False(t, g.Retired(r))
			if inSlab(tab, r) {
				require.True(t, g.Retire(r, at))
				nr, err := tab.Replace(0, k, r, freshAt(g, at))
				require.NoError(t, err)
				got, _ := tab.Load(0, k)
				require.True(t, got == nr)
			}
		}
	}
}

// A slot is claimed once: every ring in a slab has a slot of its own, for
// the slab's whole life, and a sweep that leaves few keys starts a smaller
// slab, whose slots are all new.
func TestSlabSlotsAreNeverReused(t *testing.T) {
	tab, g := newTable(0)
	seen := map[uintptr]string{}
	var alive []*slabs // so that no slab's memory is freed and given to another here
	for round := range 6 {
		at := t0 + int64(round)*10*sec
		for _, k := range slabKeys(3000) {
			k = fmt.Sprint(round) + k
			if len(k) > 15 {
				k = k[:15]
			}
			r, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, at))
			require.NoError(t, err)
			alive = append(alive, tab.gens.Load())
			if inSlab(tab, r) {
				p := uintptr(r.Pointer())
				if was, ok := seen[p]; ok && was != k {
					t.Fatalf("slot %#x held %q and then %q", p, was, k)
				}
				seen[p] = k
			}
		}
		for i := range tab.Shards() {
			tab.SweepShard(i, at+5*sec)
		}
		require.Zero(t, tab.Len())
	}
	runtime.KeepAlive(alive)
	g0 := tab.gens.Load()
	require.Nil(t, g0.prev, "a shrunk slab keeps its predecessor")
	require.Equal(t, uint64(slabMinSlots), g0.cur.mask+1, "no keys left, but the slab was not shrunk")
}

// Lookups race creations, replacements and sweeps of keys whose slots are
// nearly all taken (a slab of 64 slots and 48 keys, all sharing a few
// hashes' slots): a Load returns only a ring of its own key, and never one
// retired before the Load began.
func TestSlabLookupsRaceChurn(t *testing.T) {
	tab, g := newTable(0)
	tab.ForceHashMask(0x7) // 8 hashes, 16 slots at most: slots full, keys on the heap too
	keys := slabKeys(48)
	var now atomic.Int64
	now.Store(t0)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	stop := make(chan struct{})
	workers := max(2, runtime.GOMAXPROCS(0))
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := keys[(i*7+w)%len(keys)]
				h := tab.Hash(k)
				at := now.Load()
				r, ok := tab.Load(h, k)
				if !ok {
					var err error
					if r, err = tab.LoadOrCreate(h, k, freshAt(g, at)); err != nil {
						errs <- err
						return
					}
				}
				if got := g.Key(r); got != k {
					errs <- fmt.Errorf("Load(%q) returned %q's ring", k, got)
					return
				}
				if !g.Acquire(r, at, 1, 1<<30).Dead {
					continue
				}
				if _, err := tab.Replace(h, k, r, freshAt(g, at)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for step := range 400 {
		now.Add(sec / 2)
		for i := range tab.Shards() {
			tab.SweepShard(i, now.Load())
		}
		if step%50 == 0 {
			runtime.Gosched()
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Which geometries place rings in a slab: counter rings whose slot fits
// slabMaxSlotBytes; never a log or a token bucket.
func TestSlabGeometries(t *testing.T) {
	for _, c := range []struct {
		name string
		geo  *ringslot.Geometry
		slab bool
	}{
		{"sliding", ringslot.NewGeometry(sec/10, 10, true, false), true},
		{"sliding per-key", ringslot.NewGeometry(sec/10, 10, true, true), true},
		{"strict", ringslot.NewGeometry(sec/10, 10, false, false), true},
		{"fixed", ringslot.NewGeometry(sec, 0, false, false), true},
		{"sliding, 100 sub-windows", ringslot.NewGeometry(sec/100, 100, true, false), false},
		{"log", ringslot.NewLog(sec), false},
		{"bucket", ringslot.NewBucket(10, sec, 10), false},
	} {
		tab := New(c.geo, 1, 0)
		require.Equal(t, c.slab, tab.slotWords > 0, c.name)
		if c.slab {
			w := tab.slotWords * 8
			require.Zero(t, w%ringslot.CacheLine, c.name)
			require.Equal(t, w, c.geo.Bytes(8), "%s: a slot is an 8-byte key's state", c.name)
		}
	}
}

// A slot's address is a whole number of cache lines from the slab's start,
// which is itself line-aligned: a state in a slot spans as few lines as
// one of its own.
func TestSlabSlotsAreLineAligned(t *testing.T) {
	tab, g := newTable(0)
	for _, k := range slabKeys(500) {
		r, err := tab.LoadOrCreate(tab.Hash(k), k, freshAt(g, t0))
		require.NoError(t, err)
		require.Zero(t, uintptr(r.Pointer())%ringslot.CacheLine, k)
	}
	require.Zero(t, uintptr(unsafe.Pointer(tab.gens.Load().cur.base))%ringslot.CacheLine)
}

// FuzzSlabOperations runs a sequence of creations, retirements with
// replacement, sweeps and lookups over a few keys that share their slots,
// against a model of which ring is each key's: Load must return exactly the
// model's ring, or nothing for a key swept and not created again.
func FuzzSlabOperations(f *testing.F) {
	f.Add([]byte{0, 4, 8, 1, 5, 2, 3, 7, 11, 0, 4})
	f.Add([]byte{0, 1, 2, 2, 0, 3, 1, 3, 6, 10, 14, 18})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tab, g := newTable(0)
		tab.ForceHashMask(0x3)
		keys := []string{"a", "b", "0123456789abcde", "0123456789abcdf", "0123456x", "0123456y", "a-key-too-long-for-a-slot"}
		model := map[string]ringslot.Ring{}
		at := t0
		for _, op := range ops {
			k := keys[int(op>>2)%len(keys)]
			h := tab.Hash(k)
			switch op & 3 {
			case 0: // create or find
				r, err := tab.LoadOrCreate(h, k, freshAt(g, at))
				require.NoError(t, err)
				if m, ok := model[k]; ok {
					require.True(t, r == m, "%q: a second ring", k)
				}
				model[k] = r
			case 1: // retire and replace
				if m, ok := model[k]; ok {
					g.Reset(m, nil)
					r, err := tab.Replace(h, k, m, freshAt(g, at))
					require.NoError(t, err)
					require.True(t, r != m)
					model[k] = r
				}
			case 2: // everything idle is swept
				at += 10 * sec
				for i := range tab.Shards() {
					tab.SweepShard(i, at)
				}
				clear(model)
			}
			for _, k := range keys { // and every op is followed by lookups
				r, ok := tab.Load(tab.Hash(k), k)
				m, want := model[k]
				require.Equal(t, want, ok, "%q", k)
				if ok {
					require.True(t, r == m, "%q: Load returned a ring that is not the key's", k)
				}
			}
		}
	})
}
