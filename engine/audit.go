package engine

import (
	"math"
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
