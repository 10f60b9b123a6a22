package engine

import "github.com/ringlimit/ringlimit/ringslot"

// Reset forgets the units key has used: its counts start again from zero,
// as if nothing had been admitted or charged for it (for example, to
// forgive a user's failed logins once one succeeds). It reports whether
// the engine held state for key; false means there was nothing to forget
// (a key never seen, reclaimed after being idle, or longer than
// Config.MaxKeyBytes), and nothing is created.
//
// What a Reset keeps and what it drops:
//   - The key's limit is kept: a SetLimit override, or the limit
//     Config.KeyLimit gave the key, stays in force. Only the counts go.
//   - The key stays one key: it keeps its place under Config.MaxKeys, and
//     is reclaimed when idle as before (a Reset is not activity).
//   - The key's time does not move back: decisions after the Reset are
//     made at the key's newest time or later (SlidingLog: 1 ns later).
//   - A Reservation admitted before the Reset gives nothing back to the
//     fresh count: its Cancel reports false, and a Settle below its units
//     returns nothing, as after the key was reclaimed. A Settle above its
//     units still charges the difference, at its now, to the key's
//     current state: that work's cost is known only then, as with ChargeAt.
//   - Waiters in Wait are not woken; they retry at their RetryAfter.
//
// A Reset is linearizable with the key's decisions: each one is made
// entirely before it (and its units are forgotten) or entirely after it
// (on the fresh count). Under concurrency a decision that raced the Reset
// may be refused on the old count, a false denial; none is admitted on a
// count the Reset dropped after it was taken.
//
// With Config.Audit, the self-audit learns of the Reset, and judges none of
// the key's decisions until the forgotten units have left the window (one
// Window and one sub-window after the key's newest time), so that it never
// reports a false admit the Reset caused; those decisions count as
// Unjudged. docs/semantics.md ("Resetting a key") and docs/design.md §5
// have the details.
//
// Reset takes the key's map bucket lock, as creating a key does, and
// allocates the key's fresh state; the decision path is unchanged.
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
