package ringslot

import "github.com/ringlimit/ringlimit/internal/pack"

// Cancel returns n units that Acquire admitted on r at effective epoch at
// (a log: at effective time at, Result.Epoch in both cases): the take-back
// of a reservation (docs/design.md §3b). It reports returned when it took
// the n units out of the count of that sub-window (a log: n units stamped
// at), and dead when r is retired, so that nothing was returned to it.
//
// A counter ring returns the units only while all of these hold, and
// otherwise changes nothing:
//   - r is live (a retired ring's counts are outside every window its
//     replacement is asked about, or were moved by Grow);
//   - the sub-window is still inside the key's window: at ≥ last − N, last
//     being the key's newest epoch (Fixed: at = last);
//   - the slot still holds at's tag and at least n units, so the subtraction
//     never goes below zero and never touches a slot that has moved on.
//
// Preconditions: 1 ≤ n, and the units were admitted by Acquire at (r, at)
// and not cancelled before: Cancel takes n units out of whatever the slot
// holds, so the caller must cancel each admission at most once (the engine's
// Reservation keeps that flag).
//
// Why a cancel admits nothing falsely. Linearize Cancel at its CAS on the
// slot. The argument of Acquire (acquire.go) orders admitted requests by their
// slot CAS and shows that every admitted Q read every earlier admitted unit
// of its window, in the settled slots before its own CAS and in its current
// slot through that CAS. A cancel C of P, an earlier admission, is a CAS on
// P's slot too, so relative to Q it is one of:
//   - before Q's read of P's slot: Q does not count P, and P is not live at
//     Q's CAS either. Q decides as a sequential run in which P was
//     cancelled before Q.
//   - after Q's read of P's slot (a settled one) and before Q's CAS: Q
//     counted P although P was gone at Q's CAS: an over-count, so at worst
//     a false denial.
//   - after Q's CAS: Q counted P, which was live.
//
// Q's current slot is read and CASed from the exact word, which includes
// every cancel CAS before it. Cancel removes exactly P's own units, which
// were live: no other count is lowered. So at Q's CAS, Q's estimate is at
// least the estimate of the live units of its window, and Q is admitted
// only if those live units plus Q's n fit: a cancel can make a concurrent
// decider deny falsely, never admit falsely.
//
// The cache (cache.go) is an upper bound of the admitted units of the
// settled epochs; cancelling lowers the admitted counts, so a cached value
// stays an upper bound and the claim of cache.go needs nothing new. What
// Cancel does about the cache is for precision only: a walk at an epoch in
// (at, at+N] may have counted the units now returned, and would refuse up
// to n units for the rest of its sub-window. So, like undo, Cancel loads
// last after its CAS, and if last has left at it marks every cache word
// tagged up to at+N (invalidate), so that the next writer walks again. If
// last still read at, every walk at a later epoch loads last after it left
// at, so after the CAS, and reads the returned count. A cache word tagged
// at never counts slot at (the current slot is always read), so no marker
// is needed then, and none tagged at is written while readers are at at:
// a marker tagged at, read at at, would refuse everything.
func (g *Geometry) Cancel(r Ring, at, n int64) (returned, dead bool) {
	if g.log {
		return g.logCancel(r, at, n)
	}
	if g.special {
		return g.bucketCancel(r, at, n)
	}
	last := r.word(wordLast)
	l := last.Load()
	if l < 0 {
		return false, true
	}
	if at < 0 || at > l || l-at > g.span {
		// Outside the key's window (or not an epoch of this ring): the
		// units count nowhere any more, and the slot may hold another
		// epoch whose tag aliases at's.
		return false, false
	}
	// at is within N of last and no slot is newer than last, so a slot
	// with at's tag holds epoch at (no aliasing, ring.go's invariants),
	// until the key moves on by 2^24 sub-windows: the stall of §3.
	slot := r.word(g.hdr + g.index(at))
	tag := pack.TagOf(at)
	for {
		w := slot.Load()
		if pack.TagOfWord(w) != tag || pack.CountOfWord(w) < n {
			return false, false // reset by a writer at at+N+1 or later: moved on
		}
		if slot.CompareAndSwap(w, w-n) {
			break
		}
	}
	if l2 := last.Load(); l2 > at {
		g.invalidate(r, tag)
	}
	return true, false
}

// logCancel is Cancel for a log ring: under the lock, it removes n units
// stamped exactly at, if at is still inside the window at the key's newest
// time (at > last − W) and n such units are live. Units of one time are
// interchangeable, so which n of them go does not matter. It moves the
// shorter side of the ring: the units before the run, or those after it.
func (g *Geometry) logCancel(r Ring, at, n int64) (returned, dead bool) {
	r.lock()
	defer r.unlock()
	l := r.word(logLast).Load()
	if l < 0 {
		return false, true
	}
	if at > l || at <= l-g.width {
		return false, false // left the window (or not a time of this ring)
	}
	capacity, start, size := *r.at(logCap), *r.at(logStart), *r.at(logSize)
	// Units with time < at come first (times are non-decreasing): lo is
	// the first with time ≥ at, hi the first with time > at.
	search := func(after bool) int64 {
		lo, hi := int64(0), size
		for lo < hi {
			mid := lo + (hi-lo)/2
			if s := *r.at(logHdr + wrap(start+mid, capacity)); s < at || after && s == at {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		return lo
	}
	a, b := search(false), search(true)
	if b-a < n {
		return false, false
	}
	if a <= size-b {
		// Move the a units before the run forward by n, onto the run's
		// last n places: the n removed are the run's first.
		for j := a - 1; j >= 0; j-- {
			*r.at(logHdr + wrap(start+j+n, capacity)) = *r.at(logHdr + wrap(start+j, capacity))
		}
		*r.at(logStart) = wrap(start+n, capacity)
	} else {
		// Move the units after the run back by n.
		for j := b; j < size; j++ {
			*r.at(logHdr + wrap(start+j-n, capacity)) = *r.at(logHdr + wrap(start+j, capacity))
		}
	}
	*r.at(logSize) = size - n
	return true, false
}

// Charged is the outcome of Charge.
type Charged struct {
	// Epoch is where the units were recorded: the effective epoch (a log:
	// the effective time), t's or the key's newest when t was older.
	Epoch int64
	// Dead: r is retired and nothing was recorded; reload the key's ring
	// and charge again.
	Dead bool
	// Full: nothing was recorded or changed (not even the key's time),
	// because the key cannot count n more units: a counter ring's
	// sub-window would pass pack.MaxCount, a log's live units keep.
	Full bool
	// Grow, on a log: its capacity cannot hold the units. Nothing was
	// recorded; move the log into a ring of capacity Grow (GrowCap) and
	// charge again.
	Grow int64
}

// Charge records n units at time t on r whatever the limit: a debt, for
// a cost known only after the work (docs/design.md §3b). The units are
// recorded where an admission at t would be, at t's epoch or the key's
// newest when t is older, and count exactly as admitted units do: every
// later decision counts them. Preconditions: 1 ≤ n ≤ pack.MaxCount, t ≥ 0.
//
// keep bounds a log's live units (the engine's MaxLogLimit; counter rings
// ignore it). The dispatch is here so that each algorithm charges in its
// own room: a counter ring below, a log in log.go.
func (g *Geometry) Charge(r Ring, t, n, keep int64) Charged {
	if g.log {
		return g.logCharge(r, t, n, keep)
	}
	if g.special {
		return g.bucketCharge(r, t, n)
	}
	return g.chargeRing(r, t, n)
}

// chargeRing is Charge on a counter ring. It is Acquire's protocol (steps
// 1, 3 and 4) without the estimate and without the limit: publish t's
// epoch (or clamp to last), CAS the current slot from the word read to
// word + n (a reset if it holds an older epoch, only after last was seen
// unchanged since the read), then load last again and, if it moved, undo
// the add, mark the cache words that may have counted it, and retry at the
// new epoch. So, as for an admission, a charge's units are in its slot
// before last leaves its epoch, and every walk at a later epoch counts
// them (the cache's claim, cache.go, holds for charged units as for
// admitted ones); and a decision that follows the charge's CAS counts
// them: no admission ever passes the limit over a debt.
//
// Counts never carry into the tag: a charge that would take the slot past
// pack.MaxCount records nothing and reports Full. A window's counts then
// sum to at most (N+1)·MaxCount < 2^50, which fits and retryAfter assume.
func (g *Geometry) chargeRing(r Ring, t, n int64) Charged {
	e0, _ := g.split(t)
	last := r.word(wordLast)
	for {
		l := last.Load()
		if l < 0 {
			return Charged{Dead: true}
		}
		if e0 > l {
			if e0-l >= reviveGap {
				if last.CompareAndSwap(l, retiredWord(e0)) {
					return Charged{Dead: true} // as Acquire: the replacement starts at e0
				}
				continue
			}
			if !last.CompareAndSwap(l, e0) {
				continue
			}
			l = e0
			g.settle(r, e0)
		}
		e := l // e0 ≤ l here: the key's newest epoch
		slot := r.word(g.hdr + g.index(e))
		tag := pack.TagOf(e)
		restart := false
		for {
			w := slot.Load()
			var cur int64
			if pack.TagOfWord(w) == tag {
				cur = pack.CountOfWord(w)
			} else if last.Load() != l {
				restart = true // as read: the slot may be newer than our epoch
				break
			}
			if n > pack.MaxCount-cur {
				return Charged{Epoch: e, Full: true}
			}
			if slot.CompareAndSwap(w, pack.Word(tag, cur+n)) {
				break
			}
		}
		if restart {
			continue
		}
		if g.testHookAdded != nil {
			g.testHookAdded(e)
		}
		if l2 := last.Load(); l2 != l {
			if l2 < 0 {
				// Retired by a sweep that saw l idle: the add is outside
				// the window at the retirement and the ring unreachable.
				return Charged{Dead: true}
			}
			g.undo(slot, tag, n)
			g.invalidate(r, tag)
			continue
		}
		return Charged{Epoch: e}
	}
}
