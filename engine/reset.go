package engine

import "github.com/ringlimit/ringlimit/ringslot"

// Reset forgets the units key has used: its count starts again from zero
// (to forgive a user's failed logins after a success, say). It reports
// whether the engine held state for key; a key it does not hold (never
// seen, reclaimed, longer than Config.MaxKeyBytes) is not created.
//
// It keeps the key's limit (a SetLimit override, or KeyLimit's), its
// place under Config.MaxKeys, and its time: later decisions are made at
// the key's newest time or after (SlidingLog: 1 ns after). A Reservation
// admitted before it gives nothing back to the fresh count (Cancel
// reports false); a Settle above its units still charges the difference
// at its now. A Reset is linearizable with the key's decisions, and does
// not wake Wait. With Config.Audit, the key's decisions for one Window and
// one sub-window after it are Unjudged, never false admits.
// docs/semantics.md ("Resetting a key") has the details.
func (e *Engine) Reset(key string) bool {
	if len(key) > e.cfg.maxKey {
		return false
	}
	h := e.tab.Hash(key)
	r, found := e.tab.Load(h, key)
	for found {
		var reset bool
		var aud *auditReset
		if e.audit != nil && e.sampled(h) {
			aud = &auditReset{a: e.audit, key: key}
		}
		old := r
		next := func() ringslot.Ring {
			// Under the key's bucket lock, while old is still the key's
			// state: no Replace or Grow of old can interleave.
			var before func(int64)
			if aud != nil {
				before = aud.before
			}
			at, ok := e.geo.Reset(old, before)
			if aud != nil {
				aud.after()
			}
			if !ok {
				// Retired already, by a sweep or a far writer: its counts
				// are outside every window of its replacement, which the
				// next writer makes (or the sweep removes it).
				return old
			}
			reset = true
			if e.geo.IsLog() {
				// After R: an older Reservation's Cancel follows a
				// retired log into the key's current one (a log that
				// SetLimit grew), and must find no unit of its time.
				at++
			}
			// The limit is read after the retirement: a SetLimit that
			// stored into old before it is kept; one after it finds old
			// retired and sets the fresh state's.
			return e.geo.New(at, e.ringLimit(old), key)
		}
		r, found = e.tab.Swap(h, key, old, next)
		if !found || reset || r == old {
			return found
		}
		// Replaced meanwhile (revived, grown, or reset by another call):
		// reset the key's current state.
	}
	return false
}
