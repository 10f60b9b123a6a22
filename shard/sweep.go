package shard

import (
	"github.com/ringlimit/ringlimit/ringslot"
)

// SweepShard visits every ring of shard i once. A ring idle at now (the
// key idle for longer than Window plus one sub-window) is retired and
// deleted, and so is a ring anyone retired at or before now; a ring a
// far-ahead writer retired at a later time is left to that writer (see
// ringslot.Geometry.Retire and docs/design.md §5). A writer that published
// a newer epoch before the retire CAS keeps the ring; one that loaded the
// ring just before finds it retired and retries on a fresh ring, so no
// increment is lost. Sweeps of one shard may run concurrently (a caller's
// Engine.Sweep beside the background sweeper): each key is deleted by one
// of them. It returns the number of keys reclaimed.
func (t *Table) SweepShard(i int, now int64) int {
	n := t.sweepMaps(i, now)
	if n > 0 {
		t.shrink()
	}
	return n
}

// sweepMaps is SweepShard without its shrink of the slab.
func (t *Table) sweepMaps(i int, now int64) int {
	s := &t.shards[i]
	n := 0
	s.m.Range(func(h uint64, r ringslot.Ring) bool {
		if t.geo.Retire(r, now) && t.remove(s, h, t.geo.Key(r), r) {
			n++
		}
		return true
	})
	if fb := s.fb.Load(); fb != nil {
		fb.Range(func(key string, r ringslot.Ring) bool {
			if t.geo.Retire(r, now) && t.remove(s, t.Hash(key), key, r) {
				n++
			}
			return true
		})
	}
	return n
}

// remove deletes key from s if its ring is still r, raising s's floor to
// r's retirement time first, under the bucket lock of its hash h.
func (t *Table) remove(s *shard, h uint64, key string, r ringslot.Ring) bool {
	removed := false
	s.m.Compute(h, func(cur ringslot.Ring, loaded bool) (ringslot.Ring, bool) {
		at := t.find(s, key, cur, loaded)
		if !at.present || at.r != r {
			// Deleted or replaced meanwhile: keep what is there. For an
			// absent hash keep answers delete, the only answer that
			// leaves it absent.
			return keep(cur, loaded)
		}
		s.raiseFloor(t.geo.RetiredAt(r))
		t.live.Add(-1)
		s.evicted.Add(1)
		removed = true
		if at.resident {
			return cur, true
		}
		s.fb.Load().Delete(key)
		return keep(cur, loaded)
	})
	return removed
}
