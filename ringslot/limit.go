package ringslot

import (
	"github.com/ringlimit/ringlimit/internal/pack"
)

// Limit returns the ring's own limit (per-key geometries only). A decision
// passes it to Acquire, which checks that it still holds when the decision
// is made.
func (g *Geometry) Limit(r Ring) int64 { return pack.CountOfWord(r.word(g.limitAt).Load()) }

// SetLimit replaces the ring's own limit (per-key geometries only) and
// reports whether the ring holds it afterwards: false when r is retired (a
// new limit stored in it is lost with it), or is a log ring whose capacity
// is below limit (see Grow). Counts are kept; units already admitted are not
// revoked. A change is linearized at its CAS on the limit word, which also
// moves the word's version on: a decision is made entirely under the limit
// before the change or entirely under the one after it (Acquire; for a log,
// the change is made under the key's lock), never under one it read before
// the change and applied after it (docs/design.md §3c).
func (g *Geometry) SetLimit(r Ring, limit int64) bool {
	if g.log {
		return g.logSetLimit(r, limit)
	}
	if g.IsBucket() {
		return false // the engine refuses per-key limits with a bucket
	}
	lw := r.word(g.limitAt)
	for {
		w := lw.Load()
		if pack.CountOfWord(w) == limit {
			break // no change: in-flight decisions stay valid
		}
		if lw.CompareAndSwap(w, pack.Word(pack.TagOfWord(w)+1, limit)) { // the version wraps mod 2^24
			break
		}
	}
	return !g.Retired(r)
}

// limitHeld reports whether a decision may keep its admission: it read the
// limit word as was before its CAS and as now after it, and decided under
// limit ≤ was's limit. It may if the word is unchanged (no change between
// the two loads), or if exactly one change came between (the version moved
// by one) and set a limit no lower than limit. Either way every limit in
// force between the two loads, the one at the CAS among them, is at least
// limit (docs/design.md §3c).
func limitHeld(was, now, limit int64) bool {
	return now == was || (pack.TagOfWord(now)-pack.TagOfWord(was))&tagMask == 1 && pack.CountOfWord(now) >= limit
}
