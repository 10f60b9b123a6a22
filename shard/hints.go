package shard

import (
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/ringlimit/ringlimit/ringslot"
)

// The hints are a shard's lookup cache: a set-associative table of rings
// that a Load reads before the xsync map. A set is one cache line of
// hintWays cells, chosen by the low bits of the key's hash; a cell holds a
// ring and, in the low bits of its pointer, a tag of the key's hash, so
// that Load reads the state of no other key but rarely. A hit costs the
// set's line and the ring, which the decision reads anyway; the map costs
// a bucket and an entry more, two dependent cache misses at a million keys.
//
// The map stays the index of record: every insert, replace and delete goes
// through it (shard's invariants), and a hint is only a guess that Load
// checks.
//
// Invariants:
//   - A cell holds nothing, or a ring that was in this shard's maps for the
//     key it holds, at some time since it was stored.
//   - A ring leaves the maps (removed, or replaced by another ring for its
//     key) only after it is retired, and a retired ring never comes back to
//     life (ringslot: last never changes once retired).
//
// So a ring read from a cell that holds key and is not retired when Load
// checks it is in the maps at that moment, for that key: the hit is the
// answer the map would give at that moment, and Load stays linearizable. A
// cell that holds another key is a miss: Load asks the map and stores what
// it finds in an empty cell. A cell that holds the key's ring retired is
// freed by that Load. remove clears the cell of the ring it deletes; a Load
// that read a ring from the map just before the delete can still remember
// it after, and such a cell is freed by the key's next Load or by the
// shard's next sweep (scrubHints), so no reclaimed state is kept from the
// collector longer than that.
type hintTable struct {
	mask uint64 // len(sets) − 1
	// Each cell is nil or a ring's state address plus its key's tag; cells
	// are read and written atomically.
	sets []hintSet
}

// hintSet is one cache line of cells.
type hintSet [hintWays]unsafe.Pointer

const (
	hintWays = 8  // cells per set: one 64-byte line of pointers
	tagBits  = 6  // a ring's state is 64-byte aligned: its pointer's low 6 bits are free
	tagShift = 32 // the tag's bits of the hash: neither the shard's (top) nor the set's (low)
	minHints = 2  // sets
	// hintsFrom is the number of keys a shard holds before it keeps hints
	// (Table.hintsFrom; tests lower it). Below it the map's bucket and
	// entry stay in the caches and the hints only add a line and a probe:
	// with hints from the first key, 1,000 keys in an engine decided
	// serially were 30% slower than on the map alone (benchstat, 10
	// interleaved runs), while at a million keys they save two cache misses.
	// The hints go when the keys fall below half of it.
	hintsFrom = 1024
	// smallHints is the size (cells) up to which a shard keeps two cells
	// per key rather than one: at one cell per key about one key in eight
	// finds its set full and goes to the map, which costs a small table
	// more than its memory (32 KiB a shard at most).
	smallHints = 4096
)

// DisableHints stops every shard of t from keeping hints; call it before
// t is used.
func (t *Table) DisableHints() { t.hintsFrom = math.MaxInt64 }

// newHints returns an empty table of sets sets, a power of two.
func newHints(sets int) *hintTable {
	return &hintTable{mask: uint64(sets - 1), sets: make([]hintSet, sets)}
}

// tagOf returns h's tag, 1 … 63 (6 bits of h, 0 read as 1): never 0, so
// that an empty cell (nil) matches no tag.
func tagOf(h uint64) uintptr {
	t := uintptr(h>>tagShift) & (1<<tagBits - 1)
	return t | (t-1)>>(8*ptrSize-1) // t − 1 has its top bit set only when t is 0
}

// ringOfCell returns the ring a non-nil cell p names: p less its tag.
func ringOfCell(p unsafe.Pointer) ringslot.Ring {
	return ringslot.RingAt(unsafe.Add(p, -int(uintptr(p)&(1<<tagBits-1))))
}

// set returns h's set.
func (c *hintTable) set(h uint64) *hintSet { return &c.sets[h&c.mask] }

// remember caches r as h's ring, in the first empty cell of h's set. A
// full set takes no more: its other keys stay in the map alone, and cost a
// Load what they would without hints. Evicting a hint for another would
// make two keys that share a set take turns missing.
func (s *shard) remember(h uint64, r ringslot.Ring) {
	base := r.Pointer()
	if uintptr(base)&(1<<tagBits-1) != 0 {
		return // not 64-byte aligned (an allocator that does not size-class by lines): no hint
	}
	c := s.hints.Load()
	if c == nil {
		return
	}
	set := c.set(h)
	p := unsafe.Add(base, int(tagOf(h))) // still inside the state, which is at least 64 bytes
	for i := range set {
		if q := atomic.LoadPointer(&set[i]); q == p || q == nil && atomic.CompareAndSwapPointer(&set[i], nil, p) {
			return
		}
	}
}

// replace makes h's cell that holds old hold r instead, or remembers r.
func (s *shard) replace(h uint64, old, r ringslot.Ring) {
	c := s.hints.Load()
	if c == nil {
		return
	}
	set, tag := c.set(h), int(tagOf(h))
	p, np := unsafe.Add(old.Pointer(), tag), unsafe.Add(r.Pointer(), tag)
	if uintptr(r.Pointer())&(1<<tagBits-1) != 0 {
		np = nil // r cannot be hinted (remember): free old's cell instead
	}
	for i := range set {
		if atomic.CompareAndSwapPointer(&set[i], p, np) {
			return
		}
	}
	s.remember(h, r)
}

// forget clears h's cell that holds r, if any.
func (s *shard) forget(h uint64, r ringslot.Ring) {
	c := s.hints.Load()
	if c == nil {
		return
	}
	set := c.set(h)
	p := unsafe.Add(r.Pointer(), int(tagOf(h)))
	for i := range set {
		atomic.CompareAndSwapPointer(&set[i], p, nil)
	}
}

// added counts a key added to s. A shard's hints start, empty, when its
// keys reach t.hintsFrom, and double when the keys outnumber the cells
// (half the cells, up to smallHints): the new table gets every hint of
// the old one, each in its set under the new mask (found from the key the
// ring holds), as far as the sets have room. Hints stored in the old table
// while the new one is built are lost with it; their keys are remembered
// again on their next Load. A concurrent grow wins or loses as a whole.
func (t *Table) added(s *shard) {
	n := s.keys.Add(1)
	c := s.hints.Load()
	if c == nil {
		if n >= t.hintsFrom {
			s.hints.CompareAndSwap(nil, newHints(setsFor(2*n)))
		}
		return
	}
	if cells := int64(len(c.sets) * hintWays); n <= cells && (cells > smallHints || 2*n <= cells) {
		return
	}
	t.rehint(s, c, 2*len(c.sets))
}

// setsFor returns the sets, a power of two and at least minHints, that
// hold cells cells.
func setsFor(cells int64) int {
	n := minHints
	for int64(n*hintWays) < cells {
		n *= 2
	}
	return n
}

// removed counts a key removed from s, and halves the hints when the keys
// fill less than a quarter of them, or drops them when the keys fall below
// half of t.hintsFrom.
func (t *Table) removed(s *shard) {
	n := s.keys.Add(-1)
	c := s.hints.Load()
	switch {
	case c == nil:
	case n < t.hintsFrom/2:
		s.hints.CompareAndSwap(c, nil)
	case len(c.sets) > minHints && n < int64(len(c.sets)*hintWays/4):
		t.rehint(s, c, len(c.sets)/2)
	}
}

// rehint replaces s's hints c with a table of sets sets holding c's.
func (t *Table) rehint(s *shard, c *hintTable, sets int) {
	nc := newHints(sets)
	for i := range c.sets {
		for k := range c.sets[i] {
			t.rehintCell(nc, atomic.LoadPointer(&c.sets[i][k]))
		}
	}
	s.hints.CompareAndSwap(c, nc)
}

// rehintCell puts cell p of an old table in its set of nc, if it has room.
// A retired ring is left out: it is out of the maps, or soon will be.
func (t *Table) rehintCell(nc *hintTable, p unsafe.Pointer) {
	if p == nil {
		return
	}
	r := ringOfCell(p)
	if t.geo.Retired(r) {
		return
	}
	set := nc.set(t.Hash(t.geo.Key(r)))
	for j := range set {
		if set[j] == nil {
			set[j] = p // nc is not published yet
			return
		}
	}
}

// scrubHints frees every cell of s that holds a retired ring: one left by
// a Load that remembered a ring it read from the map just before a sweep
// deleted it and cleared its cell. The sweep that runs it reclaims the
// shard's idle keys too, so such a state is kept from the collector for at
// most one sweep cycle, or until its key's next Load, which frees the cell
// too (Table.Load).
func (t *Table) scrubHints(s *shard) {
	c := s.hints.Load()
	if c == nil {
		return
	}
	for i := range c.sets {
		for k := range c.sets[i] {
			p := atomic.LoadPointer(&c.sets[i][k])
			if p == nil {
				continue
			}
			if t.geo.Retired(ringOfCell(p)) {
				atomic.CompareAndSwapPointer(&c.sets[i][k], p, nil)
			}
		}
	}
}
