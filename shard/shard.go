// Package shard maps keys to rings across power-of-two sharded xsync maps,
// creates rings on first sight, and reclaims idle ones.
//
// shard is a building block of package engine, which is the API to use. It
// is exported so that the engine, its tests and its benchmarks can reach it;
// it makes no compatibility promise outside the engine, and may change in
// any release.
package shard

import (
	"errors"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/ringlimit/ringlimit/internal/keyhash"
	"github.com/ringlimit/ringlimit/ringslot"
)

// ErrFull is returned when a new key would exceed the table's MaxKeys.
var ErrFull = errors.New("ringlimit: MaxKeys reached; new keys are refused until idle keys are reclaimed")

// cacheLine pads per-shard state so that two shards' counters never share a
// line (64 bytes on amd64 and arm64).
const cacheLine = 64

// hashU64 only folds in xsync's per-table seed: the key is already the
// key's mixed, seeded hash. xsync takes buckets from bits 7 and up and its
// tag from bits 0–6, none of which the shard index (the top bits) fixes.
func hashU64(h, seed uint64) uint64 { return h ^ seed }

// shard holds its keys in two maps. m maps a key's 64-bit hash to the
// state of one key with that hash, its resident; the state holds the key's
// bytes (ringslot.Geometry.HasKey), so a lookup compares the key in the
// state's own cache lines and the table keeps no string. Another key with
// the same 64-bit hash (a full collision: rare, and not aimable, since the
// hash is seeded) lives in fb, keyed by the string, created on the first
// collision.
//
// Invariants:
//   - A key's state is in exactly one of the two maps for as long as the
//     key is present, and it never moves between them: a lock-free Load
//     that misses m (absent, or another key resident) and then looks in fb
//     cannot miss a present key.
//   - Every insert, replace and delete of a key, in m or in fb, runs inside
//     m.Compute on the key's hash, under the lock of that hash's bucket, so
//     the two maps change for one hash in one total order. fb's own locks
//     are taken only inside (lock order m, then fb).
//   - Deleting through m.Compute where the hash is absent answers "delete";
//     any other answer would store an empty state for it.
type shard struct {
	// The 64-bit words first: on 32-bit platforms they are 8-byte aligned
	// with no gap before them.
	evicted atomic.Int64
	// floor is the latest retirement time (Unix ns) of a ring this shard
	// deleted, raised under the key's bucket lock before the delete. Every
	// ring the shard creates starts at or after it: a writer that read its
	// time before the sweeper reclaimed the key, and reaches the table
	// after, must not build the key anew below counts that are still
	// inside its window (docs/design.md §5).
	floor atomic.Int64
	m     *xsync.MapOf[uint64, ringslot.Ring]
	fb    atomic.Pointer[xsync.MapOf[string, ringslot.Ring]] // nil until a collision
	_     [cacheLine - 16 - 2*ptrSize]byte                   // evicted and floor, then m and fb
}

// ptrSize is the size of a pointer: 8 bytes, or 4 on 32-bit platforms.
const ptrSize = unsafe.Sizeof(uintptr(0))

// raiseFloor lifts s.floor to at least ns.
func (s *shard) raiseFloor(ns int64) {
	for {
		f := s.floor.Load()
		if ns <= f || s.floor.CompareAndSwap(f, ns) {
			return
		}
	}
}

// fallback returns s.fb, creating it. Callers hold a bucket lock of s.m,
// not necessarily the same one, hence the CAS.
func (s *shard) fallback() *xsync.MapOf[string, ringslot.Ring] {
	if fb := s.fb.Load(); fb != nil {
		return fb
	}
	s.fb.CompareAndSwap(nil, xsync.NewMapOf[string, ringslot.Ring]())
	return s.fb.Load()
}

// Table is a sharded key → ring map. It is safe for concurrent use.
//
// Lookups of existing keys are lock-free (the slab's probe, then xsync's
// Load). Creating, replacing and deleting a key take the lock of one xsync
// bucket, inside the map.
type Table struct {
	geo      *ringslot.Geometry
	seed     keyhash.Seed
	hashMask uint64 // all ones; tests narrow it to force collisions
	shift    uint   // 64 − log2(len(shards))
	shards   []shard
	maxKeys  int64 // 0: unlimited
	// The home slab (slab.go): slotWords is 0 when the geometry's rings
	// are not placed in slots.
	gens       atomic.Pointer[slabs]
	slotWords  int
	slotKeyMax int
	slabFrom   int64 // keys present at which renew starts the first slab
	expect     int64 // Presize's keys: no slab is sized for fewer; 0: none
	_          [cacheLine]byte
	live       atomic.Int64 // keys present, for MaxKeys and Len
	refused    atomic.Int64 // keys refused by MaxKeys
	renewing   atomic.Bool  // a slab is being started (renew, shrink)
	_          [cacheLine - 20]byte
}

// New returns a table of nshards shards (a power of two ≥ 1) for rings of
// geometry geo, with a random hash seed of its own, which
// randomises shard and bucket placement. maxKeys ≤ 0 means unlimited.
func New(geo *ringslot.Geometry, nshards int, maxKeys int64) *Table {
	t := &Table{
		geo:      geo,
		seed:     keyhash.NewSeed(),
		hashMask: ^uint64(0),
		shift:    uint(64 - bits.TrailingZeros(uint(nshards))),
		shards:   make([]shard, nshards),
		maxKeys:  maxKeys,
		slabFrom: slabFromKeys,
	}
	if w := slotWordsOf(geo); w > 0 {
		t.slotWords, t.slotKeyMax = w, geo.SlotKeyMax()
	}
	for i := range t.shards {
		t.shards[i].m = xsync.NewMapOfWithHasher[uint64, ringslot.Ring](hashU64)
	}
	return t
}

// ForceHashMask makes Hash keep only the bits of mask, so that distinct
// keys collide in full: mask 0 gives every key the same hash. It is for
// tests of the collision path, and must be called before the first key is
// stored.
func (t *Table) ForceHashMask(mask uint64) { t.hashMask = mask }

// SlabFrom makes the table start its first slab when n keys are present
// (0: at the first key) rather than at slabFromKeys. It is for tests that
// exercise the slab with few keys, and must be called before the first key
// is stored.
func (t *Table) SlabFrom(n int64) { t.slabFrom = n }

// Presize sizes the table for n keys (0 < n ≤ PresizeMax(geo)) from its first
// key: its maps are presized for them, and, for a geometry whose rings go
// in slots, its first slab starts now with room for them (a power of two
// at least slabPerKey·n slots), no slab is ever sized for fewer, and a
// sweep never drops the slabs. The table still grows past n through
// generations as without it. It must be called before the first key is
// stored.
func (t *Table) Presize(n int64) {
	if n <= 0 {
		return
	}
	t.expect = n
	per := int(n / int64(len(t.shards)))
	for i := range t.shards {
		t.shards[i].m = xsync.NewMapOfWithHasher[uint64, ringslot.Ring](hashU64, xsync.WithPresize(per))
	}
	if t.slotWords != 0 {
		t.slabFrom = 0
		t.gens.Store(&slabs{cur: newSlab(t.slabSlots(0), t.slotWords)})
	}
}

// Hash returns the hash that every other method takes with key.
func (t *Table) Hash(key string) uint64 {
	return keyhash.Sum(t.seed, key) & t.hashMask
}

func (t *Table) shardOf(h uint64) *shard {
	if t.shift == 64 {
		return &t.shards[0]
	}
	return &t.shards[h>>t.shift]
}

// Load returns the key's ring, if present. It does not allocate.
//
// It looks in the newest slab first (slab.go), inline: both candidate
// slots' heads are loaded before either is compared, so that their misses
// overlap, and a hit there is the common case once the table has a slab.
func (t *Table) Load(h uint64, key string) (ringslot.Ring, bool) {
	if g := t.gens.Load(); g != nil {
		if head := t.geo.SlotHead(key, t.slotKeyMax); head != 0 {
			p, q := t.slots(g.cur, h)
			r, s := ringslot.RingAt(p), ringslot.RingAt(q)
			hr, hs := t.geo.LoadHead(r), t.geo.LoadHead(s)
			if hr == head && t.geo.SlotTailMatches(r, key) && !t.geo.Retired(r) {
				return r, true
			}
			if hs == head && t.geo.SlotTailMatches(s, key) && !t.geo.Retired(s) {
				return s, true
			}
			if g.prev != nil {
				if r, ok := t.probe(g.prev, g.old, h, key, head); ok {
					return r, true
				}
			}
		}
	}
	return t.loadMap(h, key)
}

// loadMap is Load's look in the maps.
func (t *Table) loadMap(h uint64, key string) (ringslot.Ring, bool) {
	s := t.shardOf(h)
	if r, ok := s.m.Load(h); ok {
		if match, known := t.geo.MatchKey(r, key); match || !known && t.geo.HasKey(r, key) {
			return r, true
		}
	}
	if fb := s.fb.Load(); fb != nil {
		return fb.Load(key)
	}
	return ringslot.Ring{}, false
}

// LoadLocked is Load under the bucket lock of h: a Replace, Swap or
// remove of the key in progress when it is called has finished by the time
// it returns. So a ring that Swap retired (a log that Grow moved) is never
// returned: Swap retires it and installs its successor under that lock.
// It is for the rare callers that found a ring retired and must tell a
// move from a reclamation (Engine's Cancel); the decision path uses Load.
func (t *Table) LoadLocked(h uint64, key string) (ringslot.Ring, bool) {
	s := t.shardOf(h)
	var got slot
	s.m.Compute(h, func(cur ringslot.Ring, loaded bool) (ringslot.Ring, bool) {
		got = t.find(s, key, cur, loaded)
		return keep(cur, loaded)
	})
	return got.r, got.present
}

// Fresh tells the table how to build a new ring for key: the time it
// starts at, which must be at or after floor, the earliest time at which no
// count the key's reclaimed or retired state held is inside any window (a
// caller's fresh starts at max(its time, floor)), and its limit
// (ringslot.Geometry.New). The table builds the ring, in its slab or not.
type Fresh func(floor int64, key string) (start, limit int64)

// build builds key's ring as fresh says, under h's bucket lock.
func (t *Table) build(h uint64, key string, fresh Fresh, floor int64) ringslot.Ring {
	start, limit := fresh(floor, key)
	return t.newRing(h, key, start, limit)
}

// slot is where one key lives, found under its hash's bucket lock: in m as
// the resident (cur, when loaded and it is the key's), in fb, or absent.
type slot struct {
	r        ringslot.Ring // the key's state, if present
	present  bool
	resident bool // present in m (else in fb)
}

// find locates key given m's current value for its hash (cur, loaded).
// Callers hold the hash's bucket lock.
func (t *Table) find(s *shard, key string, cur ringslot.Ring, loaded bool) slot {
	if loaded && t.geo.HasKey(cur, key) {
		return slot{r: cur, present: true, resident: true}
	}
	if fb := s.fb.Load(); fb != nil {
		if r, ok := fb.Load(key); ok {
			return slot{r: r, present: true}
		}
	}
	return slot{}
}

// put stores r as its key's state under the hash's bucket lock, where find
// located the key (at), or, for an absent key, as the resident when the
// hash is free and in fb when another key is resident. It returns m.Compute's
// answer for the hash: r for a resident; otherwise the hash's value left as
// it was, which for an absent hash (the key lives in fb, its resident was
// reclaimed) is "delete".
func (t *Table) put(s *shard, at slot, cur ringslot.Ring, loaded bool, r ringslot.Ring) (ringslot.Ring, bool) {
	if at.resident || !at.present && !loaded {
		return r, false
	}
	// Keyed by r's own copy of the key: the table retains no caller's
	// string.
	s.fallback().Store(t.geo.Key(r), r)
	return keep(cur, loaded)
}

// keep is m.Compute's answer that leaves the hash as it was: its value if
// loaded, else absent (delete).
func keep(cur ringslot.Ring, loaded bool) (ringslot.Ring, bool) { return cur, !loaded }

// LoadOrCreate returns the key's ring, creating it with fresh if absent.
// fresh may be called and its ring dropped when another goroutine creates
// the key first. It returns ErrFull when the key is absent and MaxKeys are
// present.
func (t *Table) LoadOrCreate(h uint64, key string, fresh Fresh) (ringslot.Ring, error) {
	if r, ok := t.Load(h, key); ok {
		return r, nil
	}
	s := t.shardOf(h)
	full, added := false, false
	var got ringslot.Ring
	s.m.Compute(h, func(cur ringslot.Ring, loaded bool) (ringslot.Ring, bool) {
		at := t.find(s, key, cur, loaded)
		switch {
		case at.present:
			got = at.r
			return keep(cur, loaded)
		case !t.reserve():
			full = true
			return keep(cur, loaded)
		}
		added = true
		got = t.build(h, key, fresh, s.floor.Load())
		return t.put(s, at, cur, loaded, got)
	})
	if full {
		return ringslot.Ring{}, ErrFull
	}
	if added {
		t.renew()
	}
	return got, nil
}

// reserve counts one more key, or reports false at MaxKeys. It is a CAS
// loop rather than add-then-undo, so that Len never reads above MaxKeys.
func (t *Table) reserve() bool {
	if t.maxKeys <= 0 {
		t.live.Add(1)
		return true
	}
	for {
		n := t.live.Load()
		if n >= t.maxKeys {
			t.refused.Add(1)
			return false
		}
		if t.live.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Range calls fn for every key present and its ring, one shard at a time,
// until fn returns false. Like xsync's Range it is not a snapshot: keys
// created or reclaimed meanwhile may or may not be visited. The key string
// shares the ring's memory (ringslot.Geometry.Key).
func (t *Table) Range(fn func(key string, r ringslot.Ring) bool) {
	for i := range t.shards {
		more := true
		visit := func(r ringslot.Ring) bool {
			more = fn(t.geo.Key(r), r)
			return more
		}
		t.shards[i].m.Range(func(_ uint64, r ringslot.Ring) bool { return visit(r) })
		if fb := t.shards[i].fb.Load(); more && fb != nil {
			fb.Range(func(_ string, r ringslot.Ring) bool { return visit(r) })
		}
		if !more {
			return
		}
	}
}

// Shards returns the number of shards.
func (t *Table) Shards() int { return len(t.shards) }

// Len returns the number of keys present. It is exact when no key is being
// created or reclaimed concurrently, and never above MaxKeys.
func (t *Table) Len() int64 { return t.live.Load() }

// Evicted returns the number of rings reclaimed since creation.
func (t *Table) Evicted() int64 {
	var n int64
	for i := range t.shards {
		n += t.shards[i].evicted.Load()
	}
	return n
}

// Refused returns the number of new keys refused by MaxKeys.
func (t *Table) Refused() int64 { return t.refused.Load() }
