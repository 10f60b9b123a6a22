package engine

import (
	"math"
	"strings"
)

// The self-audit's side of Engine.Reset. A Reset drops units the audit's
// log still holds, so the log must forget them too, at the Reset's place
// in the order of the key's decisions:
//
//   - The event is claimed in the buffer before the engine's reset (the
//     retirement of the key's state) and written after it, with the time R
//     the state was retired at (its newest sub-window's start; a log: its
//     newest time). Every decision made on the fresh state comes after the
//     retirement, so it is buffered after the event, and its effective time
//     is at least R: sorted by sub-window, stably, it is replayed after the
//     Reset. The drain stops at the claimed cell until it is written.
//   - A decision made on the old state can still be buffered after the
//     event (its goroutine was preempted between deciding and buffering).
//     Its time is at most R's sub-window's end, and its units enter the log
//     there. So the replayed Reset empties the key's log and judges none of
//     the key's decisions before trustAfter = R + one sub-window + W: from
//     then on, every unit at or before R's sub-window is outside the window
//     of the decision judged, and the log holds exactly the fresh units.
//   - A Reset that cannot claim a cell (the buffer is full) is counted in
//     Dropped, and quarantines [R, R + sub-window + W) before the engine's
//     reset, as a dropped decision quarantines its window: the decisions
//     judged against a log that still holds the forgotten units are
//     exactly those, and none of them is judged.

// auditReset is one Reset of a sampled key, for Engine.Reset.
type auditReset struct {
	a       *auditor
	key     string
	at      int64 // R, as last given to before
	pos     uint64
	tried   bool
	claimed bool
}

// before runs with R just before the engine's reset takes effect (and
// again with a later R if a writer moved the key on meanwhile).
func (s *auditReset) before(at int64) {
	s.at = at
	if !s.tried {
		s.tried = true
		s.pos, s.claimed = s.a.ring.claim()
		if s.claimed && s.pos&(s.a.ring.mask>>2) == s.a.ring.mask>>2 {
			s.a.wake() // every quarter buffer, as a push
		}
		if !s.claimed {
			s.a.wake()
			s.a.dropped.Add(1)
		}
	}
	if !s.claimed {
		s.a.quarantine(at, s.a.resetUntil(at))
	}
}

// after writes the claimed event, once the engine's reset is done (or
// found the state retired already: the event then only makes the audit
// more careful).
func (s *auditReset) after() {
	if s.claimed {
		s.a.ring.fill(s.pos, auditEvent{key: s.key, t: s.at, kind: evReset})
	}
}

// resetUntil is the end of the span after a Reset at R whose decisions the
// audit does not judge: R + one sub-window + W.
func (a *auditor) resetUntil(at int64) int64 { return satAdd(at, satAdd(a.width, a.window)) }

// quarantine widens the span of unjudged times to cover [from, until).
func (a *auditor) quarantine(from, until int64) {
	for cur := a.dropFrom.Load(); from < cur && !a.dropFrom.CompareAndSwap(cur, from); cur = a.dropFrom.Load() {
	}
	for cur := a.dropUntil.Load(); until > cur && !a.dropUntil.CompareAndSwap(cur, until); cur = a.dropUntil.Load() {
	}
}

// claim takes the next cell for an event to be written later by fill, or
// reports false when it is not free (the buffer is full). Like push, with
// no cells kept back: a Reset, like a take-back, may use the last eighth.
func (r *auditRing) claim() (uint64, bool) {
	pos := r.tail.Load()
	for {
		c := &r.cells[pos&r.mask]
		switch d := int64(c.seq.Load() - pos); {
		case d == 0:
			if r.tail.CompareAndSwap(pos, pos+1) {
				return pos, true
			}
			pos = r.tail.Load()
		case d < 0:
			return pos, false
		default:
			pos = r.tail.Load()
		}
	}
}

// replayReset empties the key's log and distrusts its decisions until the
// units the Reset dropped have left the window (see the top of this file).
func (a *auditor) replayReset(ev *auditEvent) {
	until := a.resetUntil(ev.t)
	if up, ok := a.skipped[ev.key]; ok {
		// Kept out of the logs by a cap: stay out until the dropped units
		// have left the window too.
		*up = max(*up, until)
		return
	}
	k := a.keys[ev.key]
	if k == nil {
		if len(a.keys) >= a.maxKeys {
			if len(a.skipped) < a.maxSkipped {
				a.skipped[strings.Clone(ev.key)] = ptr(until)
			} else {
				a.watermark = max(a.watermark, until)
			}
			return
		}
		k = &shadowKey{trustAfter: a.watermark, newest: math.MinInt64}
		a.keys[strings.Clone(ev.key)] = k
	}
	a.entries -= int64(len(k.log) - k.head)
	clear(k.log)
	k.log, k.head, k.sum = k.log[:0], 0, 0
	k.charged, k.chargedIn = 0, 0
	k.trustAfter = max(k.trustAfter, until)
	k.newest = max(k.newest, ev.t)
}
