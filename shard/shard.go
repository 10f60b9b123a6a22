// Package shard maps keys to rings across power-of-two sharded xsync maps,
// creates rings on first sight, and reclaims idle ones.
package shard

import (
	"errors"
	"math/bits"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/ringlimit/ringlimit/internal/keyhash"
	"github.com/ringlimit/ringlimit/ringslot"
)

// ErrFull is returned when a new key would exceed the table's MaxKeys.
var ErrFull = errors.New("ringlimit: MaxKeys reached; new keys are refused until idle keys are reclaimed")

// cacheLine pads per-shard state so that two shards' counters never share a
// line (64 bytes on amd64 and arm64).
const cacheLine = 64

// mapKey carries the key's hash beside the key, so the map never hashes the
// string again: the one xxhash of the key, already mixed with the table's
// secret seed, picks the shard by its top bits and the bucket by its low
// bits. The full string is compared on lookup, so two keys never share a
// ring through a hash collision.
type mapKey struct {
	h uint64
	s string
}

// hashMapKey only folds in xsync's per-table seed: k.h is already a mixed,
// seeded hash, and xsync takes buckets from bits 7 and up and its tag from
// bits 0–6, none of which the shard index (the top bits) fixes.
func hashMapKey(k mapKey, seed uint64) uint64 { return k.h ^ seed }

type shard struct {
	m       *xsync.MapOf[mapKey, ringslot.Ring]
	evicted atomic.Int64
	// floor is the latest retirement time (Unix ns) of a ring this shard
	// deleted, raised under the key's bucket lock before the delete. Every
	// ring the shard creates starts at or after it: a writer that read its
	// time before the sweeper reclaimed the key, and reaches the table
	// after, must not build the key anew below counts that are still
	// inside its window (docs/design.md §5).
	floor atomic.Int64
	_     [cacheLine - 24]byte
}

// raiseFloor lifts s.floor to at least ns.
func (s *shard) raiseFloor(ns int64) {
	for {
		f := s.floor.Load()
		if ns <= f || s.floor.CompareAndSwap(f, ns) {
			return
		}
	}
}

// Table is a sharded key → ring map. It is safe for concurrent use.
//
// Lookups of existing keys are lock-free (xsync's Load). Creating, replacing
// and deleting a key take the lock of one xsync bucket, inside the map.
type Table struct {
	geo     *ringslot.Geometry
	seed    uint64
	shift   uint // 64 − log2(len(shards))
	shards  []shard
	maxKeys int64 // 0: unlimited
	_       [cacheLine]byte
	live    atomic.Int64 // keys present, for MaxKeys and Len
	refused atomic.Int64 // keys refused by MaxKeys
	_       [cacheLine - 16]byte
}

// New returns a table of nshards shards (a power of two ≥ 1) for rings of
// geometry geo. seed randomises shard and bucket placement. maxKeys ≤ 0
// means unlimited.
func New(geo *ringslot.Geometry, nshards int, seed uint64, maxKeys int64) *Table {
	t := &Table{
		geo:     geo,
		seed:    seed,
		shift:   uint(64 - bits.TrailingZeros(uint(nshards))),
		shards:  make([]shard, nshards),
		maxKeys: maxKeys,
	}
	for i := range t.shards {
		t.shards[i].m = xsync.NewMapOfWithHasher[mapKey, ringslot.Ring](hashMapKey)
	}
	return t
}

// Hash returns the hash that every other method takes with key.
func (t *Table) Hash(key string) uint64 { return keyhash.Mix(keyhash.Sum(key), t.seed) }

func (t *Table) shardOf(h uint64) *shard {
	if t.shift == 64 {
		return &t.shards[0]
	}
	return &t.shards[h>>t.shift]
}

// Load returns the key's ring, if present. It does not allocate.
func (t *Table) Load(h uint64, key string) (ringslot.Ring, bool) {
	return t.shardOf(h).m.Load(mapKey{h, key})
}

// Fresh builds a new ring for a key: it must start at or after floor, the
// earliest time at which no count the key's reclaimed or retired state held
// is inside any window (a caller's fresh starts at max(its time, floor)).
type Fresh func(floor int64) ringslot.Ring

// LoadOrCreate returns the key's ring, creating it with fresh if absent.
// fresh may be called and its ring dropped when another goroutine creates
// the key first. It returns ErrFull when the key is absent and MaxKeys are
// present.
func (t *Table) LoadOrCreate(h uint64, key string, fresh Fresh) (ringslot.Ring, error) {
	s := t.shardOf(h)
	full := false
	r, _ := s.m.LoadOrTryCompute(mapKey{h, key}, func() (ringslot.Ring, bool) {
		if !t.reserve() {
			full = true
			return ringslot.Ring{}, true
		}
		return fresh(s.floor.Load()), false
	})
	if full {
		return ringslot.Ring{}, ErrFull
	}
	return r, nil
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

// Replace swaps the retired ring old for a fresh one and returns the key's
// current ring. If someone already replaced or deleted old, it returns
// that ring or creates one, under the same MaxKeys rule as LoadOrCreate.
//
// Invariants (docs/design.md §5): the swap happens under the key's bucket
// lock and only while old is still the key's ring, so of any number of
// writers that found old retired exactly one installs a ring and the others
// get it. The floor fresh is given is at or after old's retirement time
// (ringslot.Geometry.RetiredAt): every count of old is outside the window
// there, and a writer whose time is older is clamped forward to it, so no
// count still inside any window of the key's timeline is dropped.
func (t *Table) Replace(h uint64, key string, old ringslot.Ring, fresh Fresh) (ringslot.Ring, error) {
	s := t.shardOf(h)
	full := false
	r, ok := s.m.Compute(mapKey{h, key}, func(cur ringslot.Ring, loaded bool) (ringslot.Ring, bool) {
		switch {
		case loaded && cur != old:
			return cur, false // already replaced
		case loaded:
			s.evicted.Add(1) // old counts as reclaimed; its slot in live is reused
			return fresh(max(s.floor.Load(), t.geo.RetiredAt(old))), false
		case !t.reserve():
			full = true
			return cur, true // absent, and stays absent
		default:
			return fresh(max(s.floor.Load(), t.geo.RetiredAt(old))), false
		}
	})
	if full || !ok {
		return ringslot.Ring{}, ErrFull
	}
	return r, nil
}

// Swap replaces the key's ring old with next() and returns the key's ring
// afterwards. next runs under the key's map bucket lock, and only while old
// is still the key's ring, so no Replace or Swap of old can interleave with
// it: that is what lets a sliding log move into a larger ring
// (ringslot.Geometry.Grow) without a writer replacing it with an empty one.
// Unlike Replace it counts nothing as evicted: the key stays one key. ok is
// false when the key is absent (reclaimed meanwhile); it stays absent.
func (t *Table) Swap(h uint64, key string, old ringslot.Ring, next func() ringslot.Ring) (r ringslot.Ring, ok bool) {
	s := t.shardOf(h)
	return s.m.Compute(mapKey{h, key}, func(cur ringslot.Ring, loaded bool) (ringslot.Ring, bool) {
		switch {
		case !loaded:
			return cur, true // absent, and stays absent
		case cur == old:
			return next(), false
		default:
			return cur, false // already replaced or moved
		}
	})
}

// SweepShard visits every ring of shard i once. A ring idle at now (the
// key idle for longer than Window plus one sub-window) is retired and
// deleted, and so is a ring anyone retired at or before now; a ring a
// far-ahead writer retired at a later time is left to that writer (see
// ringslot.Geometry.Retire and docs/design.md §5). A writer that published a newer epoch before the retire CAS
// keeps the ring; one that loaded the ring just before finds it retired and
// retries on a fresh ring, so no increment is lost. Sweeps of one shard may
// run concurrently (a caller's Engine.Sweep beside the background sweeper):
// each key is deleted by one of them. It returns the number of keys
// reclaimed.
func (t *Table) SweepShard(i int, now int64) int {
	s := &t.shards[i]
	n := 0
	s.m.Range(func(k mapKey, r ringslot.Ring) bool {
		if !t.geo.Retire(r, now) {
			return true
		}
		if t.remove(s, k, r) {
			n++
		}
		return true
	})
	return n
}

// remove deletes k from s if its ring is still r, raising s's floor to r's
// retirement time first, under the bucket lock.
func (t *Table) remove(s *shard, k mapKey, r ringslot.Ring) bool {
	removed := false
	s.m.Compute(k, func(cur ringslot.Ring, loaded bool) (ringslot.Ring, bool) {
		switch {
		case !loaded:
			// Deleted meanwhile. Returning (cur, false) here would store
			// the zero Ring for the key: delete is the only answer that
			// leaves an absent key absent.
			return cur, true
		case cur == r:
			s.raiseFloor(t.geo.RetiredAt(r))
			t.live.Add(-1)
			s.evicted.Add(1)
			removed = true
			return cur, true
		}
		return cur, false // replaced meanwhile: keep the new ring
	})
	return removed
}

// Range calls fn for every key present and its ring, one shard at a time,
// until fn returns false. Like xsync's Range it is not a snapshot: keys
// created or reclaimed meanwhile may or may not be visited.
func (t *Table) Range(fn func(key string, r ringslot.Ring) bool) {
	for i := range t.shards {
		more := true
		t.shards[i].m.Range(func(k mapKey, r ringslot.Ring) bool {
			more = fn(k.s, r)
			return more
		})
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
