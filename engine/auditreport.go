package engine

// AuditReport is what Engine.Audit returns: the self-audit's counts since
// the engine started, over the decisions of sampled keys (Config.Audit).
// Each decision with 1 ≤ n ≤ the key's limit is judged at its time t
// against C, the exact units the engine admitted for the key in
// (t − W, t], with L the limit it decided with: an admission with C + n >
// L is a false admit, a denial with C + n ≤ L a false deny. What each
// algorithm should show, and how to read the counts: docs/audit.md.
//
// One report is consistent (read under the audit's lock after a drain):
// Decisions = Admits + Denies = Judged + Unjudged. Counts are cumulative;
// subtract two reports for a rate.
type AuditReport struct {
	// Share is Config.Audit; 0 means the audit is off and the report empty.
	Share float64
	// Decisions shadowed: Admits + Denies.
	Decisions, Admits, Denies int64
	// Judged decisions were compared with a complete log; Unjudged ones
	// were replayed but not judged, because their window's log may be
	// incomplete or may hold units the engine no longer counts (a drop, a
	// cap, a late buffering, a Reset: docs/audit.md).
	Judged, Unjudged int64
	// FalseAdmits and FalseDenies, among the judged decisions.
	FalseAdmits, FalseDenies int64
	// WorstWindow is the largest exact count of admitted units in one
	// window, over the judged admissions of every key, as a multiple of
	// the limit in force: ≤ 1 for Strict and SlidingLog, < 2 for
	// SlidingWindow, ≤ 2 for FixedWindow. WorstKey is that key (of keys
	// tied, the least).
	WorstWindow float64
	WorstKey    string
	// Unadmits counts every Cancel of an audited reservation that gave
	// units back, and every Settle below its units that did, once.
	// UnadmitMissed is the part of them whose units the log no longer
	// held (out of the exact window, or the log dropped).
	Unadmits, UnadmitMissed int64
	// Charges counts the charges replayed into the logs (ChargeAt, and
	// Settle above a reservation's units): their units count in the
	// exact window as admitted ones do, and are judged by no one.
	Charges int64
	// Keys shadowed now, and log Entries held now (bounded by
	// AuditMaxKeys and AuditMaxEntries).
	Keys    int
	Entries int64
	// KeysSkipped counts sampled keys refused a log, or that lost theirs,
	// at AuditMaxKeys or AuditMaxEntries (a lower bound past
	// max(AuditMaxKeys, 4096) such keys at once); Skipped counts their
	// decisions, which are not in Decisions.
	KeysSkipped, Skipped int64
	// Dropped counts sampled decisions that found the buffer full
	// (AuditBuffer): not in Decisions, and the window after each is
	// Unjudged. A nonzero value asks for a larger AuditBuffer or more
	// frequent Audit calls.
	Dropped int64
}

// report drains the buffer and returns the counts.
func (a *auditor) report() AuditReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drainLocked()
	r := a.rep
	r.Share = a.share
	r.Keys = len(a.keys)
	r.Entries = a.entries
	r.Dropped = a.dropped.Load()
	u := a.unloggedCancels.Load()
	r.Unadmits += u
	r.UnadmitMissed += u
	return r
}

// Audit drains the self-audit's buffer and returns its counts (see
// AuditReport for how to read them). It returns the zero report, Share 0,
// when Config.Audit is 0. It is safe for concurrent use with decisions and
// with itself; it takes the audit's lock (never held on the decision path)
// and replays every decision buffered since the last drain.
func (e *Engine) Audit() AuditReport {
	if e.audit == nil {
		return AuditReport{}
	}
	return e.audit.report()
}
