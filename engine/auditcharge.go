package engine

import (
	"math"
	"strings"
)

// The self-audit's side of a debt (ChargeAt, and Settle above a
// reservation's units): the charged units enter the key's exact log at
// the charge's effective time, as admitted units do, so that every
// decision after it is judged against them, and the charge itself is
// judged by no one (it is not a decision about the window).
//
// A charge is buffered after the engine's charge, as an admission is.
// Decisions of other sub-windows are replayed in the engine's order
// (drainLocked sorts by sub-window, and a key's effective sub-window never
// moves back). In the charge's own sub-window the buffer's order can
// differ from the engine's either way:
//   - a decision made after the charge (it counted the debt) but buffered
//     before it is replayed without the debt: it can show as a false deny,
//     never as a false admit, since what fits with the debt fits without;
//   - an admission made before the charge (it never saw the debt) but
//     buffered after it (its goroutine was preempted between deciding and
//     buffering) is replayed with the debt, and would show as a false
//     admit that did not happen. The audit cannot tell it from an
//     admission made after the charge, so an admission that fits the
//     exact window without the charges of its own sub-window, but not with
//     them, is replayed Unjudged (afterCharge). A sequential caller's
//     admission over a debt in the debt's sub-window is Unjudged too: the
//     engine's refusal there is proved (docs/design.md §3b) and tested
//     against the model, not left to the audit.
// Buffered before the engine's charge instead, every decision made
// between the two would be replayed with units it could not see.

// recordCharge buffers a charge of n units of a sampled key at its
// effective time t. A charge that finds the buffer full is counted in
// Dropped and quarantines the window after it, as a dropped decision does.
//
//go:noinline
func (a *auditor) recordCharge(key string, t, n int64) {
	a.push(auditEvent{key: key, t: t, n: n, kind: evCharge})
}

// replayCharge adds a charge's units to k's log (the key's, which the
// charge may have created), at the charge's time, or at the key's newest
// time if that is later in the same sub-window, as replay places an
// admission; a charge whose sub-window the drain has already passed (its
// goroutine was preempted before buffering it) is placed at its own time.
func (a *auditor) replayCharge(k *shadowKey, ev *auditEvent) {
	late := k.newest != math.MinInt64 && ev.t/a.width < k.newest/a.width
	t := max(ev.t, k.newest)
	k.newest = t
	a.entries -= int64(k.expire(t - a.window))
	a.rep.Charges++
	if a.entries >= a.maxEntries {
		// As an admission would: the key stops being shadowed until its
		// units have left the window.
		a.entries -= int64(len(k.log) - k.head)
		delete(a.keys, ev.key)
		a.rep.KeysSkipped++
		a.skipped[strings.Clone(ev.key)] = ptr(satAdd(t, a.window))
		return
	}
	if late {
		k.insert(auditEntry{t: ev.t, id: ev.pos + 1, n: ev.n})
	} else {
		k.log = append(k.log, auditEntry{t: t, id: ev.pos + 1, n: ev.n})
		if sub := t / a.width; k.charged > 0 && k.chargedIn == sub {
			k.charged += ev.n
		} else {
			k.charged, k.chargedIn = ev.n, sub
		}
	}
	k.sum += ev.n
	a.entries++
	if late {
		a.entries -= int64(k.expire(t - a.window))
	}
}

// afterCharge reports whether ev, an admission replayed at t over c units
// of k's exact window, can be judged only by an order the buffer does not
// keep: it fits the window without the charges of its own sub-window, but
// not with them (see the top of this file). Such an admission is Unjudged.
func (k *shadowKey) afterCharge(ev *auditEvent, t, c, width int64) bool {
	return ev.kind == evAdmit && k.charged > 0 && k.chargedIn == t/width &&
		c+ev.n > ev.limit && c-k.charged+ev.n <= ev.limit
}
