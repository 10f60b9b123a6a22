package engine

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// auditEntry is one admitted decision in a key's exact log: n units at the
// effective time t; id is its admit event's buffer position + 1, which an
// unadmit of a reservation names.
type auditEntry struct {
	t  int64
	id uint64
	n  int64
}

// shadowKey is the exact sliding log of one sampled key: its admitted
// units whose effective time is inside (newest − W, newest], oldest first,
// with their sum. It holds at most the admitted decisions of one window:
// fewer than 2·L entries for SlidingWindow, at most L for Strict and the
// log, 2·L for Fixed (n ≥ 1 each), and never more than AuditMaxEntries
// over all keys.
type shadowKey struct {
	log    []auditEntry
	head   int   // log[:head] has left the window
	sum    int64 // Σ n of log[head:]
	newest int64 // the newest effective time of any of the key's decisions
	// trustAfter: decisions before it are replayed but not judged, because
	// the log may miss units admitted before the key got its shadow (see
	// auditor.watermark).
	trustAfter int64
	// charged: the units charged in sub-window chargedIn, the key's newest
	// when they were replayed (auditcharge.go).
	charged, chargedIn int64
}

// expire drops the entries at or before cut.
func (k *shadowKey) expire(cut int64) (dropped int) {
	for k.head < len(k.log) && k.log[k.head].t <= cut {
		k.sum -= k.log[k.head].n
		k.head++
		dropped++
	}
	live := len(k.log) - k.head
	switch {
	case cap(k.log) > 4*live+shadowSlack:
		// After a burst has left the window: give the memory back, so
		// that a log's capacity stays within 4·live + shadowSlack.
		k.log = append(make([]auditEntry, 0, 2*live+shadowSlack/2), k.log[k.head:]...)
		k.head = 0
	case k.head > shadowSlack && k.head*2 > len(k.log):
		k.log = k.log[:copy(k.log, k.log[k.head:])]
		k.head = 0
	}
	return dropped
}

// shadowSlack is the capacity a log may keep beyond 4× its live entries.
const shadowSlack = 16

// insert adds en in time order, after the entries of its time: the log
// stays sorted by t (a late decision's entry can be older than the newest).
func (k *shadowKey) insert(en auditEntry) {
	i, _ := slices.BinarySearchFunc(k.log[k.head:], en.t+1, func(e auditEntry, t int64) int { return cmp.Compare(e.t, t) })
	k.log = slices.Insert(k.log, k.head+i, en)
}

// unadmit takes up to n units of the admission id (admitted at ref) back
// out of the log, and returns how many, and the entry as it was, with n
// the units taken, when that emptied it: an emptied entry is removed, so
// that reservations cancelled over and over do not fill the log. It
// returns 0 when that admission has left the window (or was never in the
// log, or id is 0).
func (k *shadowKey) unadmit(ref int64, id uint64, n int64) (took int64, removed auditEntry, emptied bool) {
	if id == 0 {
		return 0, removed, false
	}
	// An entry's t is at least its own decision's time, and t never
	// decreases along the log: the search stops at the first entry older
	// than ref.
	for i := len(k.log) - 1; i >= k.head && k.log[i].t >= ref; i-- {
		if en := &k.log[i]; en.id == id {
			took = min(n, en.n)
			en.n -= took
			k.sum -= took
			if en.n == 0 {
				removed = *en
				removed.n = took
				k.log = slices.Delete(k.log, i, i+1)
				return took, removed, true
			}
			return took, removed, false
		}
	}
	return 0, removed, false
}

// readmit puts back what one unadmit took: units into the admission id's
// entry, or the entry it removed, if still inside the window at the key's
// newest time. It reports whether the entry was put back whole.
func (k *shadowKey) readmit(tk takenUnits, window int64) (reinserted bool) {
	if tk.units == 0 {
		return false
	}
	if tk.emptied {
		if tk.t <= k.newest-window {
			return false // left the window meanwhile
		}
		k.insert(auditEntry{t: tk.t, id: tk.id, n: tk.units})
		k.sum += tk.units
		return true
	}
	for i := len(k.log) - 1; i >= k.head && k.log[i].t >= tk.ref; i-- {
		if en := &k.log[i]; en.id == tk.id {
			en.n += tk.units
			k.sum += tk.units
			return false
		}
	}
	return false
}

// drain replays the buffered decisions into the logs.
func (a *auditor) drain() {
	a.mu.Lock()
	a.drainLocked()
	a.mu.Unlock()
}

func (a *auditor) drainLocked() {
	evs := a.scratch[:0]
	for {
		ev, ok := a.ring.pop()
		if !ok {
			break
		}
		evs = append(evs, ev)
	}
	// Read after the pops: a decision dropped before any event taken here
	// was pushed has stored its dropUntil by now, if it returned.
	q := quarantine{a.dropFrom.Load(), a.dropUntil.Load()}
	// Concurrent decisions of one key reach the buffer in any order: replay
	// them by sub-window, which is the order the engine applied them in
	// (a key's effective sub-window never moves back), and within one
	// sub-window in the order they were buffered. Not by exact time: a
	// decision the engine clamped to the start of the key's newest
	// sub-window came after the decisions later in that sub-window. Stable,
	// so that an unadmit also follows its admission.
	w := a.width
	slices.SortStableFunc(evs, func(x, y auditEvent) int { return cmp.Compare(x.t/w, y.t/w) })
	// With the logs at AuditMaxKeys, make room for this batch's new keys
	// first: a key idle for two windows before the batch's oldest decision
	// has nothing of its own in any window of this batch.
	// At most once per quarter window, like the pass after the batch: with
	// the cap reached and nothing idle, every drain would walk every log.
	if len(evs) > 0 && len(a.keys) >= a.maxKeys {
		oldest := evs[0].t
		for i := range evs {
			oldest = min(oldest, evs[i].t)
		}
		if oldest-a.prePruned >= a.window/4 {
			a.prePruned = oldest
			a.prune(oldest)
		}
	}
	for i := range evs {
		a.now = max(a.now, evs[i].t)
		a.replay(&evs[i], q)
		evs[i] = auditEvent{}
	}
	a.scratch = evs[:0]
	if a.now-a.pruned >= a.window/4 {
		a.pruned = a.now
		a.prune(a.now)
	}
}

// quarantine is the span of times [from, until) whose decisions are not
// judged, because a dropped decision at from … until − W may have admitted
// units the logs miss: a unit at s counts at t iff s ≤ t < s + W. It never
// shrinks: conservative, never wrong.
type quarantine struct{ from, until int64 }

func (q quarantine) holds(t int64) bool { return t >= q.from && t < q.until }

// replay applies one event to its key's log and counts it.
func (a *auditor) replay(ev *auditEvent, q quarantine) {
	if ev.kind == evReset {
		a.replayReset(ev)
		return
	}
	if len(a.skipped) > 0 { // usually none: one map lookup less per decision
		if until, ok := a.skipped[ev.key]; ok {
			if ev.t < *until {
				a.skip(ev)
				return
			}
			delete(a.skipped, ev.key) // its unlogged units have left the window
		}
	}
	k := a.keys[ev.key]
	if k == nil {
		if ev.kind >= evUnadmit {
			// An audited key whose log was dropped (idle two windows):
			// a cancel finds nothing, and counts as missed.
			a.takeBack(&noLog, ev)
			return
		}
		if len(a.keys) >= a.maxKeys {
			a.skip(ev) // counts the key in KeysSkipped if it can remember it
			return
		}
		k = &shadowKey{trustAfter: a.watermark, newest: math.MinInt64}
		a.keys[strings.Clone(ev.key)] = k
	}
	if ev.kind >= evUnadmit {
		a.takeBack(k, ev)
		return
	}
	if ev.kind == evCharge {
		a.replayCharge(k, ev)
		return
	}
	// Time never runs backwards for a key. ev.t is already the engine's
	// effective time: the request's, or the start of the key's newest
	// sub-window if that is later (a log: its newest time), where the
	// engine counts that whole sub-window. The audit judges such a decision
	// at the key's newest time, so that the units already admitted later
	// in that sub-window are inside the exact window too.
	// A decision of an older sub-window than one already replayed for the
	// key was buffered after a drain took the newer ones (its goroutine
	// was preempted between deciding and buffering): the engine applied
	// it before them, but the log now holds them, so it is not judged.
	late := k.newest != math.MinInt64 && ev.t/a.width < k.newest/a.width
	t := max(ev.t, k.newest)
	k.newest = t
	a.entries -= int64(k.expire(t - a.window))
	c := k.sum
	judged := !late && t >= k.trustAfter && !q.holds(t) && !k.afterCharge(ev, t, c, a.width)
	a.rep.Decisions++
	if judged {
		a.rep.Judged++
	} else {
		a.rep.Unjudged++
	}
	if ev.kind == evDeny {
		a.rep.Denies++
		if judged && c+ev.n <= ev.limit {
			a.rep.FalseDenies++
		}
		return
	}
	a.rep.Admits++
	if judged && c+ev.n > ev.limit {
		a.rep.FalseAdmits++
	}
	if a.entries >= a.maxEntries {
		// The log would pass AuditMaxEntries: the key stops being shadowed
		// until its units have left the window.
		a.entries -= int64(len(k.log) - k.head)
		delete(a.keys, ev.key)
		a.rep.KeysSkipped++
		a.skipped[strings.Clone(ev.key)] = ptr(satAdd(t, a.window)) // deleted from keys just above: not in skipped
		return
	}
	if late {
		// At its own time, which is where the engine counted it: placed at
		// the key's newest time it would stay in the window too long, and
		// the next decisions could be judged against a unit the engine
		// no longer counts.
		k.insert(auditEntry{t: ev.t, id: ev.pos + 1, n: ev.n})
	} else {
		k.log = append(k.log, auditEntry{t: t, id: ev.pos + 1, n: ev.n})
	}
	k.sum += ev.n
	a.entries++
	if late {
		a.entries -= int64(k.expire(t - a.window)) // it may be out of the window already
	}
	if judged {
		// Ties go to the least key, so that the report does not depend on
		// the order the drains happened to replay keys in (a batch is
		// sorted by sub-window, batches come in arrival order).
		if w := float64(k.sum) / float64(ev.limit); w > a.rep.WorstWindow || w == a.rep.WorstWindow && w > 0 && ev.key < a.rep.WorstKey {
			a.rep.WorstWindow, a.rep.WorstKey = w, strings.Clone(ev.key) // not the caller's backing array
		}
	}
}

// takeBack replays the events of a Cancel of an audited reservation (k:
// the key's log, nil when it has none). An unadmit takes the admission's
// units out of the log at once (the engine's cancel comes right after it)
// and remembers what it took, by its own position; the settling event
// that follows it counts it (evKept: Unadmits, and UnadmitMissed when it
// took nothing) or puts back exactly what it took (evReadmit: the engine
// gave nothing back). A key kept out of the logs by a cap (k nil) counts
// nothing: its decisions are Skipped, not audited.
func (a *auditor) takeBack(k *shadowKey, ev *auditEvent) {
	switch ev.kind {
	case evUnadmit:
		if k == nil {
			return
		}
		took, en, emptied := k.unadmit(ev.ref, ev.id, ev.n)
		if emptied {
			a.entries--
		}
		a.taken[ev.pos] = takenUnits{t: en.t, ref: ev.ref, id: ev.id, units: took, emptied: emptied}
	case evKept:
		tk, ok := a.taken[ev.id]
		delete(a.taken, ev.id)
		if ok {
			a.rep.Unadmits++
			if tk.units == 0 {
				a.rep.UnadmitMissed++
			}
		}
	case evReadmit:
		tk, ok := a.taken[ev.id]
		delete(a.taken, ev.id)
		// noLog stands for a dropped log and is shared: never written.
		if ok && k != nil && k != &noLog && k.readmit(tk, a.window) {
			a.entries++
		}
	}
}

// noLog stands for the log of an audited key that has none now (dropped
// after two idle windows): empty, never written.
var noLog shadowKey

// takenUnits is what one unadmit took out of a log: units of the
// admission id (admitted at ref, its entry at t), the entry removed when
// emptied.
type takenUnits struct {
	t, ref, units int64
	id            uint64
	emptied       bool
}

// minSkipRecords is the least number of keys kept out of the logs that
// the audit remembers (and counts in KeysSkipped), whatever AuditMaxKeys.
const minSkipRecords = 4096

// skip counts a decision of a key that has no log, and keeps the key out
// of the logs until its units have left the window.
func (a *auditor) skip(ev *auditEvent) {
	if ev.kind >= evUnadmit {
		a.takeBack(nil, ev)
		return
	}
	if ev.kind != evCharge { // a charge is not a decision
		a.rep.Skipped++
	}
	until := satAdd(ev.t, a.window)
	if cur, ok := a.skipped[ev.key]; ok {
		*cur = max(*cur, until)
		return
	}
	if len(a.skipped) < a.maxSkipped {
		a.skipped[strings.Clone(ev.key)] = ptr(until)
		a.rep.KeysSkipped++
		return
	}
	// No room to remember the key: every key that gets a log from now on
	// distrusts its decisions up to until, since it may be this one. Nor
	// can it be told from a key counted before: KeysSkipped does not count
	// it (a lower bound then; Skipped still counts its decisions).
	a.watermark = max(a.watermark, until)
}

// prune drops the logs of keys idle for two windows at now, and the skip
// records one window past their end. A window more than needed: a key's
// decisions can come a little behind the newest time the audit has seen
// (other goroutines' clocks, or drains between them), and a key that comes
// back after its log or its skip record is gone gets a new log that trusts
// nothing before the watermark. Keys idle for two windows hold nothing
// inside any window of theirs, so memory stays within the bound: the units
// admitted in one window, per key.
func (a *auditor) prune(now int64) {
	cut := now - 2*a.window
	for key, k := range a.keys {
		if k.newest <= cut {
			a.entries -= int64(len(k.log) - k.head)
			a.watermark = max(a.watermark, satAdd(k.newest, a.window))
			delete(a.keys, key)
		}
	}
	for key, up := range a.skipped {
		until := *up
		if until <= now-a.window {
			a.watermark = max(a.watermark, until)
			delete(a.skipped, key)
		}
	}
	// a.taken is not pruned: an unadmit's settling event has its cell
	// claimed with it (pushPair) and is always replayed, after it.
}
