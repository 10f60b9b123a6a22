package shard

import (
	"github.com/ringlimit/ringlimit/ringslot"
)

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
	full, built := false, false
	var got ringslot.Ring
	s.m.Compute(h, func(cur ringslot.Ring, loaded bool) (ringslot.Ring, bool) {
		at := t.find(s, key, cur, loaded)
		switch {
		case at.present && at.r != old:
			got = at.r // already replaced
			return keep(cur, loaded)
		case at.present:
			s.evicted.Add(1) // old counts as reclaimed; its slot in live is reused
		case !t.reserve():
			full = true // absent, and stays absent
			return keep(cur, loaded)
		}
		got = t.build(h, key, fresh, max(s.floor.Load(), t.geo.RetiredAt(old)))
		built = true
		return t.put(s, at, cur, loaded, got)
	})
	if full {
		return ringslot.Ring{}, ErrFull
	}
	if built {
		t.renew()
	}
	return got, nil
}

// Swap replaces the key's ring old with next() and returns the key's ring
// afterwards. next runs under the key's map bucket lock, and only while old
// is still the key's ring, so no Replace or Swap of old can interleave with
// it: that is what lets a sliding log move into a larger ring
// (ringslot.Geometry.Grow) without a writer replacing it with an empty one.
// Unlike Replace it counts nothing as evicted: the key stays one key. ok is
// false when the key is absent (reclaimed meanwhile); it stays absent.
//
// next must retire old before it returns (Grow does), as Replace requires
// old retired: a ring leaves the maps only retired, so that a writer still
// holding it, from a Load or from the slab, finds it retired and reloads.
func (t *Table) Swap(h uint64, key string, old ringslot.Ring, next func() ringslot.Ring) (r ringslot.Ring, ok bool) {
	s := t.shardOf(h)
	s.m.Compute(h, func(cur ringslot.Ring, loaded bool) (ringslot.Ring, bool) {
		at := t.find(s, key, cur, loaded)
		switch {
		case !at.present:
			return keep(cur, loaded) // absent, and stays absent
		case at.r == old:
			r, ok = next(), true
			return t.put(s, at, cur, loaded, r)
		default:
			r, ok = at.r, true // already replaced or moved
			return keep(cur, loaded)
		}
	})
	return r, ok
}
