package engine

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/ringslot"
)

// The self-audit (Config.Audit) shadows the decisions of sampled keys with
// an exact sliding log and counts where the engine's algorithm and the
// exact log disagree. It has two halves:
//
//   - On the decision path, a sampled key's decision is appended to a
//     bounded lock-free buffer (auditRing): one CAS on its tail, no lock,
//     no allocation. A decision that finds the buffer full is counted in
//     dropped, and the window after it is quarantined (dropUntil).
//   - Off the decision path, a drain (Engine.Audit, and the engine's
//     background goroutine every AuditDrainInterval) takes the buffered
//     decisions under the auditor's mutex, sorts them by time and replays
//     them into one exact log per key (shadowKey).
//
// An unsampled key pays only Engine.sampled: a multiply, a shift, a
// compare and a branch that goes the same way for every one of its
// decisions.

// AuditDrainInterval is how often the engine's background goroutine drains
// the audit buffer into the shadow logs when Config.Audit is set.
const AuditDrainInterval = 25 * time.Millisecond // the longest a decision waits in a buffer that fills less than a quarter of it

// auditMul spreads the key hash before the sampling compare, so that which
// keys are sampled does not follow the low bits the shards and the map's
// buckets use: an odd constant (2^64/φ), so the product is a bijection.
const auditMul = 0x9e3779b97f4a7c15

// auditThreshold maps a share in (0, 1] to the bound that (h·auditMul)>>1 is
// compared with: share·2^63, so 1 samples every key.
func auditThreshold(share float64) uint64 {
	if share >= 1 {
		return 1 << 63
	}
	return uint64(math.Ldexp(share, 63))
}

// sampled reports whether the key of hash h is audited. With Config.Audit
// 0, auditBelow is 0 and no key is. This is the one branch an unsampled
// key pays; it goes the same way for every decision of a key.
func (e *Engine) sampled(h uint64) bool { return (h*auditMul)>>1 < e.auditBelow }

// acquireAudited is fast's decision for a sampled key: always Acquire,
// whose Result carries the effective epoch, and the decision buffered for
// the audit at its effective time.
//
//go:noinline
func (e *Engine) acquireAudited(r ringslot.Ring, key string, n, t, limit int64) (ringslot.Result, int64, bool) {
	res := e.geo.Acquire(r, t, n, limit)
	if !res.Dead {
		e.audit.record(key, e.effective(t, res.Epoch), n, limit, res.Allowed)
	}
	return res, limit, !res.Dead
}

// auditReserve buffers a sampled key's reservation like acquireAudited,
// and returns what Reservation.audit keeps: the time the log records the
// units at, plus one, when they were admitted; else 0.
//
//go:noinline
func (e *Engine) auditReserve(key string, t, n, limit int64, res ringslot.Result) (ref int64, id uint64) {
	eff := e.effective(t, res.Epoch)
	id = e.audit.record(key, eff, n, limit, res.Allowed)
	if !res.Allowed {
		return 0, 0
	}
	return eff + 1, id
}

// auditCancel buffers that a reservation's n units, recorded in the
// audit's log at ref, are being given back, then calls cancel, the engine's
// own Cancel; if that gives nothing back, it buffers that the take-back is
// undone. The unadmit goes first, so that every decision the engine makes
// after its cancel is buffered after it, and it is timed at the key's
// newest sub-window as read before the cancel (ring's Newest), so that no
// such decision, whose sub-window is at least that one, sorts before it:
// each is replayed with the units already out of the log, as the engine
// decided it. (Buffered after the cancel, a decision admitted into the
// freed room could be replayed with the units still in the log and counted
// as a false admit: TestAuditReserveCancelConcurrent.) A decision made
// before the cancel may be replayed after the unadmit, without the units,
// which can only show a false deny, never a false admit. Decisions made
// before the cancel in older sub-windows, and all of a sequential caller's,
// are replayed before it, as they happened.
//
//go:noinline
func (e *Engine) auditCancel(key string, ring ringslot.Ring, ref int64, id uint64, n int64, cancel func() bool) bool {
	t := max(e.geo.Newest(ring), ref)
	// A log that SetLimit moved into a larger allocation is retired, and
	// its Newest says nothing: the key's newest time is its current ring's
	// (a reservation's ring may be any earlier one).
	if cur, ok := e.tab.Load(e.tab.Hash(key), key); ok && cur != ring {
		t = max(t, e.geo.Newest(cur))
	}
	// The unadmit claims the next cell too, for its settling event, so
	// that the settle can never be dropped: every take-back the drain
	// replays is settled, and its record in auditor.taken lives exactly
	// until then (a prune used to drop records older than two windows
	// whose settle had not been replayed yet, losing the cancel from
	// Unadmits: TestAuditCountsEveryCancelOfALaggingKey). The consumer
	// stops at the claimed cell until the settle is written, a few
	// instructions after the engine's cancel.
	if id == 0 {
		// The admission itself was dropped from the buffer, so no log
		// holds its units and a take-back would take nothing; pushing
		// one would only spend the eighth kept for the take-backs of
		// buffered admissions (300,000 sequential reserve-cancel pairs on
		// a 64-cell buffer dropped 274,782 take-backs). The cancel is
		// counted here, as one whose units the log did not hold.
		ok := cancel()
		if ok {
			e.audit.unloggedCancels.Add(1)
		}
		return ok
	}
	pos, pushed := e.audit.pushTakeBack(auditEvent{key: key, t: t, ref: ref, n: n, id: id, kind: evUnadmit})
	if testHookAuditCancel != nil {
		testHookAuditCancel()
	}
	ok := cancel()
	if pushed {
		// Settle exactly this unadmit (its position names it): keep it,
		// or undo what it took.
		kind := evReadmit
		if ok {
			kind = evKept
		}
		e.audit.ring.fill(pos+1, auditEvent{key: key, t: t, ref: ref, n: n, id: pos, kind: kind})
	}
	return ok
}

// testHookAuditCancel, when a test sets it, runs in an audited Cancel
// between buffering the unadmit and the engine's cancel.
var testHookAuditCancel func()

// effective is the time a decision at t was made at, given its Result's
// Epoch: t, or the start of the key's newest sub-window when t was older
// (SlidingLog: the key's newest time), as AllowAt documents.
func (e *Engine) effective(t, epoch int64) int64 {
	if e.cfg.Algorithm == SlidingLog {
		return epoch
	}
	if epoch == e.geo.EpochOf(t) {
		return t
	}
	return epoch * e.cfg.width
}

// Audited reports whether key's decisions are shadowed by the self-audit
// (Config.Audit): a fixed property of the key for this engine (its hash is
// seeded per engine). It is false for every key when Audit is 0.
func (e *Engine) Audited(key string) bool { return e.sampled(e.tab.Hash(key)) }

// The kinds of audit events.
const (
	evAdmit   uint8 = iota // n units admitted at t
	evDeny                 // n units refused at t
	evCharge               // n units charged at t whatever the limit (auditcharge.go)
	evUnadmit              // n units of the admission id (admitted at ref) are being returned (a Cancel, before the engine's)
	evReadmit              // the engine did not take them back after all: the unadmit id is undone
	evKept                 // the engine took them back: the unadmit id stands
	evReset                // the key's counts were dropped at t (Engine.Reset; auditreset.go)
)

// auditEvent is one sampled decision, as the buffer holds it.
type auditEvent struct {
	key   string
	t     int64 // the decision's time (Unix ns); an unadmit's own time
	ref   int64 // evUnadmit, evReadmit: the time of the admission
	n     int64
	limit int64 // the key's limit the engine decided with
	// id: an evUnadmit's names the admission (its entry's id: its admit
	// event's buffer position + 1; 0: unknown); an evReadmit's or evKept's
	// is the buffer position of the evUnadmit it settles.
	id uint64
	// pos is the event's own buffer position (set as it is popped).
	pos  uint64
	kind uint8
}

// cacheLine pads the buffer's tail away from the fields around it: writers
// of sampled keys CAS it from every core.
const cacheLine = 64

// auditRing is a bounded multi-producer, single-consumer queue (Vyukov's
// bounded MPMC queue with one consumer). Cell i of lap k holds sequence
// number i+k·len while free for position i+k·len, and position+1 once its
// event is written.
//
// Invariant: a writer owns a cell from its successful CAS of tail (from p
// to p+1, made only while the cell's seq equals p) until it stores seq =
// p+1; the consumer owns it from loading seq == p+1 until it stores seq =
// p+len. Those stores and loads are the only synchronisation: the event's
// plain fields are written before the releasing store and read after the
// acquiring load, so each side sees the other's writes whole. A cell whose
// writer has claimed it but not finished stops the consumer there; the
// events behind it wait for the next drain, never skipped.
type auditRing struct {
	_     [cacheLine]byte
	tail  atomic.Uint64 // the next position a writer claims
	_     [cacheLine - 8]byte
	head  uint64 // the next position the consumer reads; under auditor.mu
	mask  uint64
	cells []auditCell
}

type auditCell struct {
	seq atomic.Uint64
	ev  auditEvent
}

func newAuditRing(size int) *auditRing {
	r := &auditRing{mask: uint64(size - 1), cells: make([]auditCell, size)}
	for i := range r.cells {
		r.cells[i].seq.Store(uint64(i))
	}
	return r
}

// push appends ev, or reports false when the buffer is full, or when keep
// > 0 and fewer than keep cells after it are free: a decision leaves the
// last cells to take-backs (see auditor.push). Lock-free: a failed CAS
// means another writer claimed the position. The position it took is
// returned too (for the drain's wake-up and the take-backs' ids).
func (r *auditRing) push(ev auditEvent, keep uint64) (uint64, bool) {
	pos := r.tail.Load()
	for {
		if keep > 0 {
			// The cell keep positions on still holds an event of the
			// previous lap: fewer than keep cells are free.
			if c := &r.cells[(pos+keep)&r.mask]; int64(c.seq.Load()-(pos+keep)) < 0 {
				return pos, false
			}
		}
		c := &r.cells[pos&r.mask]
		switch d := int64(c.seq.Load() - pos); {
		case d == 0:
			if r.tail.CompareAndSwap(pos, pos+1) {
				c.ev = ev
				c.seq.Store(pos + 1) // publishes ev to the consumer
				return pos, true
			}
			pos = r.tail.Load()
		case d < 0:
			// The cell still holds an event of the previous lap, or its
			// writer has not finished: the buffer is full.
			return pos, false
		default:
			pos = r.tail.Load() // another writer took pos meanwhile
		}
	}
}

// pushPair claims two consecutive cells, writes ev into the first and
// leaves the second to fill, or reports false when either is not free.
// Both cells are checked free for their positions before the CAS of tail
// from pos to pos+2, which succeeds only while pos is still the tail: a
// cell at or past tail is claimed by no writer and only ever becomes free
// (the consumer frees it), so the CAS owns them both. The consumer stops
// at the second cell until fill.
func (r *auditRing) pushPair(ev auditEvent) (uint64, bool) {
	pos := r.tail.Load()
	for {
		c, c2 := &r.cells[pos&r.mask], &r.cells[(pos+1)&r.mask]
		d := int64(c.seq.Load() - pos)
		switch {
		case d == 0:
			// A seq equal to the position does not prove a cell free: a
			// writer that claimed it may not have stored yet, and then
			// pos is stale. The CAS of tail settles that; before it, the
			// second cell tells full (an older lap) from stale (written
			// already at pos+1: reload).
			switch d2 := int64(c2.seq.Load() - (pos + 1)); {
			case d2 < 0:
				return pos, false // the second cell holds the previous lap's event
			case d2 > 0:
				pos = r.tail.Load()
				continue
			}
			if r.tail.CompareAndSwap(pos, pos+2) {
				c.ev = ev
				c.seq.Store(pos + 1)
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

// fill writes ev into the cell at pos, claimed by pushPair, and publishes
// it to the consumer.
func (r *auditRing) fill(pos uint64, ev auditEvent) {
	c := &r.cells[pos&r.mask]
	c.ev = ev
	c.seq.Store(pos + 1)
}

// pop takes the next event, or reports false when none is ready. Consumer
// only (under auditor.mu).
func (r *auditRing) pop() (auditEvent, bool) {
	c := &r.cells[r.head&r.mask]
	if c.seq.Load() != r.head+1 {
		return auditEvent{}, false
	}
	ev := c.ev
	ev.pos = r.head
	c.ev = auditEvent{}              // no reference to the key is kept
	c.seq.Store(r.head + r.mask + 1) // frees the cell for the next lap
	r.head++
	return ev, true
}

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

// auditor is an engine's self-audit. The buffer and the drop counters are
// written on the decision path; everything else belongs to the drain and
// is guarded by mu.
type auditor struct {
	ring    *auditRing
	dropped atomic.Int64
	// unloggedCancels counts the successful Cancels of admissions whose
	// own decision was dropped from the buffer (auditCancel): in the
	// report's Unadmits and UnadmitMissed.
	unloggedCancels atomic.Int64
	dropFrom        atomic.Int64  // the earliest time of a dropped decision (MaxInt64: none)
	dropUntil       atomic.Int64  // the latest time + W of a dropped decision
	kick            chan struct{} // a drain wanted now (capacity 1; see wake)

	window     int64 // W, ns
	width      int64 // the sub-window the engine clamps times to (1 for a log)
	maxKeys    int
	maxSkipped int // skip records: max(maxKeys, minSkipRecords)
	maxEntries int64
	share      float64

	mu   sync.Mutex
	keys map[string]*shadowKey
	// skipped: keys without a log, until that time (+W of their newest
	// decision). Updated through the pointer: assigning an existing string
	// key would store the caller's copy of it (Go updates string keys).
	skipped map[string]*int64
	// taken: what each replayed unadmit took out of a log, by its buffer
	// position, until its settling event (evKept or evReadmit) is
	// replayed, which always follows (its cell is claimed with the
	// unadmit's): at most one record per Cancel in flight.
	taken   map[uint64]takenUnits
	entries int64
	scratch []auditEvent
	now     int64 // the newest decision time drained
	pruned  int64 // now at the last pass over idle keys
	// prePruned: the oldest time of the last batch that made room first.
	prePruned int64
	// watermark: a key given a log now may have had units that were not
	// logged (skipped with no record left, or a pruned log) inside windows
	// ending before this time, so it judges none of its decisions before it.
	watermark int64
	rep       AuditReport
}

func newAuditor(nc normalized) *auditor {
	w := nc.width
	if nc.Algorithm == SlidingLog {
		w = 1 // the log clamps to the exact newest time
	}
	a := &auditor{
		width:      w,
		ring:       newAuditRing(nc.auditBuffer),
		window:     int64(nc.Window),
		maxKeys:    nc.auditMaxKeys,
		maxSkipped: max(nc.auditMaxKeys, minSkipRecords),
		maxEntries: nc.auditMaxEntries,
		share:      nc.Audit,
		keys:       map[string]*shadowKey{},
		skipped:    map[string]*int64{},
		taken:      map[uint64]takenUnits{},
		kick:       make(chan struct{}, 1),
	}
	a.dropFrom.Store(math.MaxInt64)
	return a
}

// record buffers one sampled decision. It is kept out of line so that the
// unsampled path stays as small as it was.
//
// It returns the admission's id for a Cancel (its buffer position + 1;
// 0 when it was dropped).
//
//go:noinline
func (a *auditor) record(key string, t, n, limit int64, allowed bool) uint64 {
	kind := evDeny
	if allowed {
		kind = evAdmit
	}
	pos, ok := a.push(auditEvent{key: key, t: t, n: n, limit: limit, kind: kind})
	if !ok {
		return 0
	}
	return pos + 1
}

// push buffers ev, and returns its buffer position and whether it was
// buffered (else it was dropped, and counted).
func (a *auditor) push(ev auditEvent) (uint64, bool) {
	var keep uint64
	if ev.kind < evUnadmit {
		// Decisions leave the last eighth of the buffer to Cancel's
		// take-backs, whose loss would leave cancelled units in a log
		// for a window: a sequential caller's are never dropped.
		keep = (a.ring.mask + 1) / 8
	}
	pos, ok := a.ring.push(ev, keep)
	return a.pushed(ev, pos, ok)
}

// pushTakeBack buffers an unadmit with a cell claimed after it for its
// settling event (see Engine.auditCancel), and returns the unadmit's
// position and whether it was buffered (else both were dropped, and
// counted once).
func (a *auditor) pushTakeBack(ev auditEvent) (uint64, bool) {
	pos, ok := a.ring.pushPair(ev)
	if ok && (pos+1)&(a.ring.mask>>2) == a.ring.mask>>2 {
		a.wake() // the claimed cell ends a quarter buffer
	}
	return a.pushed(ev, pos, ok)
}

// pushed finishes a push at pos: a wake-up every quarter buffer, or the
// accounting of a drop.
func (a *auditor) pushed(ev auditEvent, pos uint64, ok bool) (uint64, bool) {
	if ok {
		if pos&(a.ring.mask>>2) == a.ring.mask>>2 {
			// Every quarter buffer: drain now, not at the next tick, and
			// leave the drain three quarters of the buffer's time to be
			// scheduled while every core is busy deciding.
			a.wake()
		}
		return pos, true
	}
	a.wake()
	// The window around a dropped decision is quarantined, from its time
	// (a decision before it cannot count its units) to one window after.
	// Written before dropped, which the drain reads after them.
	from, until := ev.t, satAdd(ev.t, a.window)
	if ev.kind >= evUnadmit {
		from = min(from, ev.ref) // from its admission's time
		// Its admission's entry may sit anywhere in the key's newest
		// sub-window (the log places it at the key's newest decision time,
		// and ev.t is that sub-window's start): a dropped take-back leaves
		// it in the log until one window after that sub-window's end.
		until = satAdd(ev.t, satAdd(a.width, a.window))
	}
	for cur := a.dropFrom.Load(); from < cur && !a.dropFrom.CompareAndSwap(cur, from); cur = a.dropFrom.Load() {
	}
	for cur := a.dropUntil.Load(); until > cur && !a.dropUntil.CompareAndSwap(cur, until); cur = a.dropUntil.Load() {
	}
	a.dropped.Add(1)
	return pos, false
}

// wake asks the engine's goroutine for a drain without waiting for its
// ticker, so that a burst of sampled decisions is drained every half
// buffer rather than dropped. It never blocks: one wake-up pending is
// enough, and after Close nothing listens.
func (a *auditor) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func ptr(v int64) *int64 { return &v }

// satAdd is a + b for b ≥ 0, saturating at MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
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
