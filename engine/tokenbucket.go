package engine

import "github.com/ringlimit/ringlimit/ringslot"

// moveBucket moves a TokenBucket key whose ring old is retired into a ring
// that carries its theoretical arrival time exactly (ringslot's
// Geometry.Carry, for a writer at t), under the key's map bucket lock
// (shard.Table.Swap): a ring a move retired still owes its units, so the
// key must not start afresh as other algorithms' keys do. It returns the
// key's ring and true, or false when the engine is not a bucket, or the
// key was reclaimed meanwhile (then it was full, and a fresh ring at the
// table's floor is the same state). docs/design.md §11.
func (e *Engine) moveBucket(h uint64, key string, old ringslot.Ring, t int64) (ringslot.Ring, bool) {
	if !e.geo.IsBucket() {
		return ringslot.Ring{}, false
	}
	return e.tab.Swap(h, key, old, func() ringslot.Ring { return e.geo.Carry(old, t) })
}
