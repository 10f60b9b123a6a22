package ringslot

// Reset retires r at its newest time R, whatever its counts, so that the
// key can start again on a fresh ring: the start of its newest sub-window
// (a log: its newest time), in Unix ns. It returns R and true, or false
// when r was retired already (reclaimed, replaced, grown, or reset), and
// then changes nothing.
//
// Unlike Retire, Reset drops counts that are still inside the window: that
// is what a reset is for. RetiredAt(r) is R afterwards, so a writer that
// finds r retired and replaces it starts the key at R or later, never
// before its newest time. A counter ring's replacement may start at R
// itself (a Reservation's Cancel never follows a retired counter ring);
// a log's must start after R (see the engine's Reset), because Cancel
// follows a retired log into the key's current ring when Grow moved it,
// and must find no unit stamped at a time of the old ring there.
//
// before, when not nil, runs with R before the retirement takes effect:
// for a counter ring before its CAS of last, and again with a later R if a
// writer moved last on meanwhile; for a log under its lock, once. The
// self-audit uses it to quarantine the window after R when it cannot
// buffer the reset.
//
// Writers racing the reset are linearized around the CAS (a log: the
// lock): one whose slot CAS came first and that saw last unchanged after
// it was admitted before the reset and is dropped with it; one that finds
// r retired, at its first load of last or at the check after its add,
// returns Dead and decides again on the key's new ring (its add, left in
// r, is unreachable).
func (g *Geometry) Reset(r Ring, before func(at int64)) (at int64, ok bool) {
	if g.log {
		r.lock()
		defer r.unlock()
		last := r.word(logLast)
		l := last.Load()
		if l < 0 {
			return 0, false
		}
		if before != nil {
			before(l)
		}
		last.Store(retiredWord(l))
		return l, true
	}
	last := r.word(wordLast)
	for {
		l := last.Load()
		if l < 0 {
			return 0, false
		}
		if before != nil {
			before(l * g.width)
		}
		if last.CompareAndSwap(l, retiredWord(l)) {
			return l * g.width, true
		}
	}
}
