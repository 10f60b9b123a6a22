package ringslot

// Retire retires r if it is still idle at t: if the key's newest request
// is more than Window plus one sub-window before t (FixedWindow, whose
// sub-window is the window: 2·Window; a log: more than Window); a writer
// that publishes a newer epoch first wins, and then the ring stays. The
// ring is retired at the epoch l + N + 1 after its newest l, where the last
// of its counts has left the window (a log: at its newest time plus W), so
// a replacement starts no earlier (RetiredAt); that is on the key's own
// timeline, and before t.
//
// It reports whether r is retired, by this call or by anyone, at a time a
// sweeper at t may remove it from the key table and raise the table's
// floor to: before t's sub-window (a log or a bucket: at or before t), so
// that the floor stays at least a sub-window behind the clock. A ring that
// a far-ahead writer retired (Acquire's revive gap) at t's sub-window or
// later reports false: only that writer's Replace, which starts the new ring
// there, may take it out before t reaches it; a sweeper that deleted it
// would let a writer at the key's present time create a ring at its own
// time, below counts still inside its window, and would raise the table's
// floor past the clock (docs/design.md §5). A t < 0 (a clock outside
// 1970 … 2262) judges nothing.
func (g *Geometry) Retire(r Ring, t int64) bool {
	if t < 0 {
		return false // a clock outside 1970 … 2262 judges nothing idle
	}
	if g.log {
		return g.logRetire(r, t)
	}
	if g.special {
		return g.bucketRetire(r, t)
	}
	e, _ := g.split(t)
	last := r.word(wordLast)
	for {
		l := last.Load()
		if l < 0 {
			// Before e, not at it: a far writer's ring retired at e and
			// removed now would lift the floor to e·w, clamping a new
			// key decided under a sub-window behind t (AllowAt's promise).
			return retiredAt(l) < e
		}
		// Epoch l ends at (l+1)·w; idle for more than W + w needs
		// t ≥ (l+1)·w + W + w, that is e ≥ l + W/w + 2.
		if e-l < g.idle {
			return false
		}
		if last.CompareAndSwap(l, retiredWord(l+g.slots)) { // l + N + 1 < l + idle ≤ e
			return true
		}
	}
}

// Newest returns the start (Unix ns) of r's newest sub-window (a log: its
// newest time), or −1 when r is retired. It only grows, so a decision made
// on r after this read is made at or after the time it returns (the
// self-audit orders a cancellation by it).
func (g *Geometry) Newest(r Ring) int64 {
	if g.IsBucket() {
		if r.word(bucketTAT).Load() >= 0 {
			return r.word(bucketBase).Load()
		}
		return -1
	}
	if g.log {
		if l := r.word(logLast).Load(); l >= 0 {
			return l
		}
		return -1
	}
	if l := r.word(wordLast).Load(); l >= 0 {
		return l * g.width
	}
	return -1
}

// Retired reports whether r has been retired.
func (g *Geometry) Retired(r Ring) bool { return r.word(wordLast).Load() < 0 }

// RetiredAt returns the time (Unix ns) at which a retired ring r was
// retired: the start of the epoch it was retired at (a log: the time). No
// count of r is inside the window there; a replacement ring must start at
// or after it, so that no writer whose time is older counts on an empty
// ring while the old ring's counts would still be inside its window. For a
// live ring it returns 0.
func (g *Geometry) RetiredAt(r Ring) int64 {
	l := r.word(wordLast).Load()
	if l >= 0 {
		return 0
	}
	if g.log {
		return retiredAt(l)
	}
	if g.special {
		return g.bucketFullAt(r, retiredAt(l))
	}
	return retiredAt(l) * g.width
}
