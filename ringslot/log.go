package ringslot

import (
	"runtime"
	"unsafe"
)

// The sliding log is the exact algorithm (docs/design.md §6): a ring keeps
// the time of every unit admitted in its window, and admits n units at t iff
// the units at times s with t−W < s ≤ t, plus n, are at most the limit. It
// uses the same Ring handle and the same one allocation of int64 words per
// key as the counter rings, so shard.Table holds both, and like them it
// keeps the key after its words (state.go). It has no cache: its decision
// is already O(1) under the lock.
//
// Layout of a log ring, logHdr + capacity words, then the key:
//
//	[logLast]      the newest time (ns) the key has seen, or
//	               retiredWord(R) once retired at time R
//	[logLimit]     the key's own limit (read by per-key engines)
//	[logLock]      the spin lock: 0 free, 1 held
//	[logCap]       capacity in units, fixed at creation (the limit it was
//	               created with; Grow moves a log into a larger ring)
//	[logStart]     physical index of the oldest live unit, in [0, cap)
//	[logSize]      number of live units, in [0, cap]
//	[logHdr+i]     the time of one admitted unit
//
// One word per unit rather than one (time, n) entry per request: a key
// costs 8 bytes per unit of its limit, and a request of n units writes n
// words, which keeps Remaining and RetryAfter O(1) reads and counting an
// O(1) check of the oldest unit (a binary search when some have left).
//
// Invariants:
//   - Live units, from logStart on in ring order, have non-decreasing times:
//     a unit is appended at the newest time the key has seen.
//   - Live units never exceed the capacity: an admission appends only if
//     the live units plus n fit the limit, and a ring's limit never
//     exceeds its capacity (SetLimit refuses, and the engine grows the ring
//     instead); a charge (a debt, logCharge) that does not fit asks for a
//     larger ring, up to the engine's MaxLogLimit live units.
//   - last only increases, until the ring is retired, after which it never
//     changes. Every unit's time is ≤ last.
//
// Why a lock: an exact log must expire old units, count, and append n units
// as one step; no single-word CAS covers that. The lock is taken by
// CompareAndSwap(0, 1) on logLock and released by Store(0). The release is
// observed by the next holder's successful CAS, so (sync/atomic) it is
// synchronized before that CAS, and every plain read and write in one
// critical section happens before those of the next. logCap, logStart,
// logSize and the times are only touched under the lock (Grow also reads
// logCap without it: it is written before the ring is published in the
// key table and never changes), so they are plain words. logLast and logLimit are written under the lock but read without
// it (Retire's first check, Retired, the engine's limit lookup), so they are
// accessed atomically.
const (
	logLast  = 0
	logLimit = 1
	logLock  = 2
	logCap   = 3
	logStart = 4
	logSize  = 5
	logHdr   = 6
)

// spinsBeforeYield bounds a lock waiter's busy loop before it yields its P:
// a critical section is tens of nanoseconds, but its holder may have been
// preempted, and then spinning only delays it.
const spinsBeforeYield = 64

// NewLog describes sliding-log rings over a window of window ns (≥ 1).
// Each ring's capacity is the limit it is created with; see New and Grow.
// Width returns window and Span 0.
func NewLog(window int64) *Geometry {
	return &Geometry{
		width:   window,
		slots:   1,
		log:     true,
		special: true,
		limitAt: logLimit,
		hdr:     logHdr,
		words:   logHdr,
		byWidth: newDivider(window),
		bySlots: newDivider(1),
	}
}

// IsLog reports whether g describes sliding-log rings.
func (g *Geometry) IsLog() bool { return g.log }

// LogBytes returns the size of a log ring's allocation for a capacity of
// limit units and a key of keyLen bytes.
func LogBytes(limit int64, keyLen int) int { return stateBytes(int(logHdr+limit), keyLen) }

// newLog allocates an empty log ring for key whose newest time is t, with
// capacity and limit both limit (≥ 1).
func newLog(t, limit int64, key string) Ring {
	w := alloc(int(logHdr+limit), key)
	w[logLast].Store(t)
	w[logLimit].Store(limit)
	w[logCap].Store(limit)
	return Ring{p: &w[0]}
}

// at returns the i-th word for plain access under the lock; see the layout.
func (r Ring) at(i int64) *int64 {
	return (*int64)(unsafe.Add(unsafe.Pointer(r.p), uintptr(i)*8))
}

// lock takes the log's spin lock: test, then test-and-set, so that waiters
// spin on a shared read rather than on failing CASes.
func (r Ring) lock() {
	l := r.word(logLock)
	for !l.CompareAndSwap(0, 1) {
		for i := 1; l.Load() != 0; i++ {
			if i%spinsBeforeYield == 0 {
				runtime.Gosched()
			}
		}
	}
}

// unlock releases the lock; see the layout for what it publishes.
func (r Ring) unlock() { r.word(logLock).Store(0) }

// wrap reduces a physical index in [0, 2·capacity) to [0, capacity).
func wrap(i, capacity int64) int64 {
	if i >= capacity {
		i -= capacity
	}
	return i
}

// expired returns how many of the size live units from start have a time
// ≤ cut, that is, are outside every window at or after cut + W. Caller
// holds the lock.
func expired(r Ring, capacity, start, size, cut int64) int64 {
	if size == 0 || *r.at(logHdr + start) > cut {
		return 0 // the common case: the oldest unit is still inside
	}
	// Times are non-decreasing from start, and unit 0 is out: find the
	// first unit in [1, size) that is inside, or size.
	lo, hi := int64(1), size
	for lo < hi {
		mid := lo + (hi-lo)/2
		if *r.at(logHdr + wrap(start+mid, capacity)) <= cut {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// logAcquire is acquire for a log ring. Under the lock: clamp t to the
// newest time seen (publishing t if newer), drop the units that left the
// window, and append n units at t iff they fit. A denial writes nothing but
// last. Preconditions: 1 ≤ n ≤ limit; a limit above the ring's capacity is
// treated as the capacity (the engine never passes one). A limit above the
// ring's own (lowered since the caller read it) records nothing and returns
// Stale, as Acquire documents.
func (g *Geometry) logAcquire(r Ring, t, n, limit int64, detail bool) Result {
	r.lock()
	last := r.word(logLast)
	l := last.Load()
	if l < 0 {
		r.unlock()
		return Result{Verdict: Verdict{Dead: true}}
	}
	if r.word(logLimit).Load() < limit {
		// Lowered since the caller read it: the decision is made here,
		// under the lock that every limit change takes, so it must be made
		// under the limit in force now (docs/design.md §3c).
		r.unlock()
		return Result{Verdict: Verdict{Dead: true, Stale: true}}
	}
	asked := t
	if t > l {
		last.Store(t)
	} else {
		t = l // time never runs backwards for a key
	}
	capacity, start, size := *r.at(logCap), *r.at(logStart), *r.at(logSize)
	limit = min(limit, capacity)
	if k := expired(r, capacity, start, size, t-g.width); k > 0 {
		start, size = wrap(start+k, capacity), size-k
		*r.at(logStart), *r.at(logSize) = start, size
	}
	if n <= limit-size { // not size+n ≤ limit, which a caller's n near math.MaxInt64 would wrap
		for i, p := int64(0), wrap(start+size, capacity); i < n; i++ {
			*r.at(logHdr + p) = t
			if p++; p == capacity {
				p = 0
			}
		}
		*r.at(logSize) = size + n
		r.unlock()
		return Result{Verdict: Verdict{Allowed: true}, Remaining: limit - size - n, Epoch: t}
	}
	var res Result
	if detail {
		res = g.logDeny(r, asked, t, capacity, start, size, n, limit)
	}
	r.unlock()
	return res
}

// logDeny builds the denial of n units asked at `asked` and decided at
// t ≥ asked (clamped to the key's newest time), given size live units from
// start. Caller holds the lock. The request fits once the k = size+n−limit
// oldest units have left the window; the k-th leaves at its time + W, and
// nothing else ever leaves sooner. The wait counts from asked.
func (g *Geometry) logDeny(r Ring, asked, t, capacity, start, size, n, limit int64) Result {
	res := Result{Remaining: max(0, limit-size), RetryAfter: Never, Epoch: t}
	if n < 0 || n > limit {
		return res // it never fits; and size + n could wrap
	}
	if k := size + n - limit; k >= 1 {
		s := *r.at(logHdr + wrap(start+k-1, capacity)) // k ≤ size as n ≤ limit
		// s + W − t > 0: the unit is inside at t. s + W may wrap near
		// 2262; the difference, at most W, does not.
		res.RetryAfter = fromCaller(s+g.width-t, t, asked)
	}
	return res
}

// logPeek is Peek for a log ring: it clamps and counts as logAcquire does,
// and writes nothing (not even last).
func (g *Geometry) logPeek(r Ring, t, n, limit int64) Result {
	r.lock()
	l := r.word(logLast).Load()
	if l < 0 {
		r.unlock()
		return Result{Verdict: Verdict{Dead: true}}
	}
	asked, t := t, max(t, l)
	capacity, start, size := *r.at(logCap), *r.at(logStart), *r.at(logSize)
	limit = min(limit, capacity)
	k := expired(r, capacity, start, size, t-g.width)
	start, size = wrap(start+k, capacity), size-k
	res := Result{Verdict: Verdict{Allowed: true}, Remaining: max(0, limit-size), Epoch: t}
	if n < 0 || n > limit-size { // as logAcquire: n is compared, never added
		res = g.logDeny(r, asked, t, capacity, start, size, n, limit)
	}
	r.unlock()
	return res
}

// logCharge is Charge for a log ring. Under the lock: clamp t to the
// newest time seen (publishing t if newer), drop the units that left the
// window, and append n units stamped t, whatever the limit.
//
// A log holds at most keep live units (the engine's MaxLogLimit, the
// memory bound of one key): a charge that would pass it reports Full and
// changes nothing, not even the newest time or the expired units, as an
// error of ChargeAt promises: a request at an older now still counts
// them, and records its units at its own time. One that does not fit the ring's capacity records
// nothing and asks for a larger ring (Charged.Grow: twice the capacity,
// or what the units need if more, at most keep). Nothing is ever dropped
// that is still inside the window: a unit older than the newest limit
// ones decides nothing while they are there, but a Cancel may take those
// newer ones out again and make it count.
func (g *Geometry) logCharge(r Ring, t, n, keep int64) Charged {
	r.lock()
	defer r.unlock()
	last := r.word(logLast)
	l := last.Load()
	if l < 0 {
		return Charged{Dead: true}
	}
	at := max(t, l) // time never runs backwards for a key
	capacity, start, size := *r.at(logCap), *r.at(logStart), *r.at(logSize)
	k := expired(r, capacity, start, size, at-g.width)
	if n > keep-(size-k) { // n is compared with the room, as Acquire does
		// Refused: nothing changes, not even the key's time or its
		// expired units, which a request at an older now (≥ l) would
		// still count.
		return Charged{Epoch: at, Full: true}
	}
	if t > l {
		last.Store(t) // units are expired at t below
	}
	if k > 0 {
		start, size = wrap(start+k, capacity), size-k
		*r.at(logStart), *r.at(logSize) = start, size
	}
	if n > capacity-size {
		return Charged{Epoch: at, Grow: min(max(size+n, 2*capacity), keep)}
	}
	for i, p := int64(0), wrap(start+size, capacity); i < n; i++ {
		*r.at(logHdr + p) = at
		if p++; p == capacity {
			p = 0
		}
	}
	*r.at(logSize) = size + n
	return Charged{Epoch: at}
}

// testHookRetire, when a test sets it, runs in logRetire between the
// unlocked check and the lock: where a writer can slip in.
var testHookRetire func(Ring)

// logRetire is Retire for a log ring: idle when the newest time seen is
// more than W before now, so that every unit is outside the window and the
// key was idle for longer than Window. The first check takes no lock, so a
// sweep over live keys reads one word per key; a writer may then move last
// before the lock is taken, so it is checked again under the lock.
func (g *Geometry) logRetire(r Ring, now int64) bool {
	last := r.word(logLast)
	if l := last.Load(); l < 0 {
		return retiredAt(l) <= now
	} else if l >= now-g.width {
		return false
	}
	if testHookRetire != nil {
		testHookRetire(r)
	}
	r.lock()
	l := last.Load()
	retired := l < 0 && retiredAt(l) <= now // by Grow meanwhile
	if l >= 0 && l < now-g.width {          // a writer may have moved it
		last.Store(retiredWord(l + g.width)) // every unit (≤ l) has left by l + W < now
		retired = true
	}
	r.unlock()
	return retired
}

// logSetLimit is SetLimit for a log ring: it refuses a limit above the
// ring's capacity, and a retired ring.
func (g *Geometry) logSetLimit(r Ring, limit int64) bool {
	r.lock()
	ok := r.word(logLast).Load() >= 0 && limit <= *r.at(logCap)
	if ok {
		r.word(logLimit).Store(limit)
	}
	r.unlock()
	return ok
}

// Grow returns a log ring of capacity max(limit, old's capacity) holding
// old's live units and newest time, with the limit set, and retires old so
// that writers still holding it find it retired and reload the key's ring.
// If old was already retired (reclaimed when idle), it moves nothing and
// returns (old, false): a retired key is replaced, with the table's floor,
// or removed, not grown.
//
// Call it only where nobody can replace old in the key table meanwhile
// (shard.Table.Swap runs it under the key's map bucket lock): a writer that
// finds old retired replaces it, and would otherwise replace it with an empty
// ring and lose the log.
func (g *Geometry) Grow(old Ring, limit int64) (Ring, bool) {
	return g.grow(old, limit, limit)
}

// GrowCap is Grow for a debt (Charged.Grow): a ring of capacity
// max(capacity, old's) that keeps old's limit.
func (g *Geometry) GrowCap(old Ring, capacity int64) (Ring, bool) {
	return g.grow(old, capacity, 0)
}

// grow is Grow with the new ring's limit (0: old's, read under its lock).
func (g *Geometry) grow(old Ring, capacity, limit int64) (Ring, bool) {
	oldCap := *old.at(logCap) // fixed since creation, which happened before
	nr := newLog(0, max(capacity, oldCap), g.Key(old))
	old.lock()
	defer old.unlock()
	l := old.word(logLast).Load()
	if l < 0 {
		return old, false
	}
	if limit == 0 {
		limit = old.word(logLimit).Load()
	}
	nr.word(logLimit).Store(limit) // before nr is published: Swap installs it
	start, size := *old.at(logStart), *old.at(logSize)
	for i := int64(0); i < size; i++ {
		*nr.at(logHdr + i) = *old.at(logHdr + wrap(start+i, oldCap))
	}
	*nr.at(logSize) = size
	nr.word(logLast).Store(l)
	old.word(logLast).Store(retiredWord(l))
	return nr, true
}
