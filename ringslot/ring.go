// Package ringslot is one key's sliding-window state: a full-width newest
// epoch and N+1 packed (tag, count) slots, updated with atomics only; or,
// for the exact sliding log (log.go), a ring of timestamps under a per-key
// spin lock.
//
// ringslot is a building block of package engine, which is the API to use. It
// makes no compatibility promise outside the engine: its API may change in
// any release.
//
// The algorithm and its bounds are stated in docs/design.md §1–3. In short, the
// window W is cut into N sub-windows of width w on the Unix-aligned grid
// e = floor(t/w), r = t − e·w. At (e, r) the window overlaps sub-windows
// e−N … e, and the estimate is
//
//	weighted:   c[e] + … + c[e−N+1] + c[e−N]·(w−r)/w
//	unweighted: c[e] + … + c[e−N]   (Strict; Fixed is the case N = 0, w = W)
//
// A request of n units is admitted iff estimate + n ≤ limit, compared
// exactly in 128-bit integers.
package ringslot

import (
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/ringlimit/ringlimit/internal/pack"
)

// Never is the RetryAfter, in nanoseconds, of a request that can never fit.
const Never = math.MaxInt64

// A retired ring's last word is retiredWord(R): R with the sign bit set, so
// that one sign test tells a live ring (last ≥ 0: epochs and times are never
// negative, the engine refuses times before 1970) from a retired one, and
// the word still carries R, the epoch (a log: the time) at which the ring
// was retired. Every count of the ring is outside the window at R, and a
// replacement starts at or after R (RetiredAt), so a key's time never runs
// backwards across a replacement. docs/design.md §5.
func retiredWord(at int64) int64 { return at | math.MinInt64 }

// retiredAt is the R of a retired ring's last word l < 0.
func retiredAt(l int64) int64 { return l & math.MaxInt64 }

// reviveGap is the idle gap, in sub-windows, at or past which a writer
// retires the ring and the key starts on a fresh one rather than reusing it.
// With settle (below), it keeps every slot's epoch within 2^23 sub-windows
// of the epoch the slot stands for, so that tags, compared modulo 2^24,
// never alias and serial comparison never wraps. docs/design.md §3.
const reviveGap = 1 << (pack.TagBits - 3)

// staleAfter is how far, in sub-windows, a slot's epoch may lag the epoch
// it stands for before settle clears it: half of reviveGap, so that a slot
// is cleared long before its tag could wrap, while the common case (a key
// idle for less than staleAfter sub-windows) costs loads and no CAS.
const staleAfter = reviveGap / 2

// Word indices of a counter ring's header (the layout is on Ring).
const (
	wordLast = 0 // last
	wordFull = 1 // the cache's settled count in full (Strict and weighted, N ≥ 1)
	wordOld  = 2 // the cache's count of e−N (weighted only)
)

// Geometry is the shape shared by every ring of one engine. It is immutable
// and safe for concurrent use.
type Geometry struct {
	width    int64  // sub-window width w in ns
	span     int64  // N: sub-windows in the window (0 for Fixed)
	slots    int64  // N+1
	weighted bool   // weight the oldest slot by (w−r)/w
	log      bool   // a sliding log (log.go): width is the window W
	special  bool   // a sliding log or a token bucket (bucket.go): not a counter ring
	bk       bucket // the token bucket's shape, when special and not log
	cache    int    // cache words after last: 2 weighted, 1 Strict, 0 Fixed and log
	limitAt  int    // word index of the per-key limit; 0 when limits are shared
	hdr      int    // header words: last, the cache words, then the limit when per-key
	words    int    // hdr + slots (the header alone for a log)
	keyOff   int    // byte offset of the key: words·8; 0 for a log, whose offset varies
	idle     int64  // sub-windows after the newest one before Retire may retire
	byWidth  divider
	bySlots  divider

	// Test hooks, nil outside tests. testHookClamped runs in acquire
	// after the clamp, with the epoch the writer will use: where a stalled
	// writer's view goes stale. testHookWalked runs after a walk of the
	// slots and before its result is published in the cache.
	// testHookAdded runs after the slot CAS and before the final check of
	// last: where an add that will be undone is visible to others.
	testHookClamped func(e int64)
	testHookWalked  func(e int64)
	testHookAdded   func(e int64)
}

// NewGeometry describes rings of span+1 slots of width ns each. Preconditions
// (checked by the engine): width ≥ 1, 0 ≤ span. Strict is weighted=false;
// Fixed is weighted=false, span=0, width=Window. With perKey each ring
// stores its own limit.
func NewGeometry(width int64, span int, weighted, perKey bool) *Geometry {
	g := &Geometry{width: width, span: int64(span), slots: int64(span) + 1, weighted: weighted}
	// A key is kept while idle for at most Window plus one sub-window: a
	// request at the end of epoch l is that old at the start of epoch
	// l + W/w + 2 (W/w is N, or 1 for Fixed, whose sub-window is W).
	g.idle = max(g.span, 1) + 2
	switch {
	case span == 0: // Fixed: nothing is settled, a decision reads one slot
	case weighted:
		g.cache = 2
	default:
		g.cache = 1
	}
	g.hdr = 1 + g.cache
	if perKey {
		g.limitAt = g.hdr
		g.hdr++
	}
	g.words = g.hdr + int(g.slots)
	g.keyOff = g.words * 8
	g.byWidth = newDivider(width)
	g.bySlots = newDivider(g.slots)
	return g
}

// Width returns the sub-window width in nanoseconds.
func (g *Geometry) Width() int64 { return g.width }

// Span returns N, the number of sub-windows in the window.
func (g *Geometry) Span() int64 { return g.span }

// Ring is a handle to one key's state. The zero Ring is invalid; copies of a
// Ring refer to the same state. All methods are safe for concurrent use.
//
// Layout of a counter ring (a log ring's is in log.go): one pointer-free
// allocation of int64 words, followed by the key (state.go), rounded up to
// whole cache lines:
//
//	[0]        last:  the newest epoch any writer has published, or
//	                  R with the sign bit set once the ring is retired at epoch R
//	[1]        full:  cache, the word (tag of e, settled count in full)
//	[2]        old:   cache, the word (tag of e, count of e−N); weighted only
//	[1+c]      limit: only with per-key limits (c: the cache words), the
//	           word (version, limit);
//	           SetLimit bumps the version (mod 2^24) with each change
//	[h+i]      slot i: the word (tag, count) for the epoch ≡ i mod N+1,
//	           h being the header's words above
//
// A word packs a 24-bit tag (epoch mod 2^24, or the limit's version) above a
// 40-bit count; the largest count is 2^40 − 1.
//
// Strict rings have one cache word, Fixed rings none (cache.go).
//
// Invariants, on which the lock-free argument rests:
//   - last only increases, until the ring is retired, after which it never
//     changes. A writer publishes its epoch in last before it writes a slot,
//     so no slot ever holds an epoch newer than last.
//   - A slot's epoch is never 2^23 or more sub-windows behind the epoch it
//     stands for (a settle clears slots lagging 2^20, and a writer 2^21 or
//     more past last retires the ring), so equal tags mean equal epochs;
//     the same holds for the cache words' tags.
//   - A slot's tag only moves forward. A reset and its first increment are
//     one CAS from the exact word that was read, made only after last was
//     seen unchanged since the clamp; a rollback subtracts only while the tag
//     is still the one it added to.
//   - A count never exceeds pack.MaxCount = 2^40 − 1: an admission's CAS
//     is conditional on the estimate, which includes the slot, leaving room
//     under the limit (≤ MaxCount); a charge's (a debt, Charge) on the
//     slot's own room under MaxCount.
//   - A cache word tagged e holds an upper bound of the admitted units of
//     its settled epochs, for every writer that can still be admitted at e
//     (cache.go has the proof).
//   - Every change of a per-key limit moves the limit word's version on by
//     one, so a writer that reads the same word before and after its CAS
//     knows that the limit did not change in between (Acquire, and
//     docs/design.md §3c).
type Ring struct{ p *atomic.Int64 }

// New allocates the state of key: a ring whose newest epoch is the epoch of
// t, whose slots are empty, and whose cache holds that epoch's settled
// counts, 0: nothing older than the ring's first epoch is ever counted in
// it. limit is stored only when the geometry has per-key limits. A log
// ring's newest time is t, and its capacity is limit (≥ 1) units.
func (g *Geometry) New(t, limit int64, key string) Ring {
	if g.special {
		if g.log {
			return newLog(t, limit, key)
		}
		return newBucket(t, 0, key)
	}
	w := alloc(g.words, key)
	e := t / g.width
	w[wordLast].Store(e)
	for k := range g.cache {
		w[wordFull+k].Store(pack.Word(pack.TagOf(e), 0))
	}
	if g.limitAt != 0 {
		w[g.limitAt].Store(limit)
	}
	return Ring{p: &w[0]}
}

// word returns the i-th word; i < g.words by construction.
func (r Ring) word(i int) *atomic.Int64 {
	return (*atomic.Int64)(unsafe.Add(unsafe.Pointer(r.p), uintptr(i)*8))
}

// Valid reports whether r refers to a ring.
func (r Ring) Valid() bool { return r.p != nil }

// Limit returns the ring's own limit (per-key geometries only). A decision
// passes it to Acquire, which checks that it still holds when the decision
// is made.
func (g *Geometry) Limit(r Ring) int64 { return pack.CountOfWord(r.word(g.limitAt).Load()) }

// Touch moves r's newest time up to t, as a writer at t does before it
// decides (a counter ring is settled at t's epoch, as Acquire settles it),
// so that state a caller sets at t (a limit) counts as activity at t. It
// never moves time backwards. A counter ring that t's epoch is 2^21 or more
// sub-windows past retires there, as Acquire would: the caller replaces it.
func (g *Geometry) Touch(r Ring, t int64) {
	if g.IsBucket() {
		return // a bucket's state is its TAT alone; time is not state
	}
	if g.log {
		r.lock()
		if l := r.word(logLast).Load(); l >= 0 && t > l {
			r.word(logLast).Store(t)
		}
		r.unlock()
		return
	}
	e0, _ := g.split(t)
	last := r.word(0)
	for {
		l := last.Load()
		if l < 0 || e0 <= l {
			return
		}
		if e0-l >= reviveGap {
			if last.CompareAndSwap(l, retiredWord(e0)) {
				return
			}
			continue
		}
		if last.CompareAndSwap(l, e0) {
			g.settle(r, e0)
			return
		}
	}
}

// SetLimit replaces the ring's own limit (per-key geometries only) and
// reports whether the ring holds it afterwards: false when r is retired (a
// new limit stored in it is lost with it), or is a log ring whose capacity
// is below limit (see Grow). Counts are kept; units already admitted are not
// revoked. A change is linearized at its CAS on the limit word, which also
// moves the word's version on: a decision is made entirely under the limit
// before the change or entirely under the one after it (Acquire; for a log,
// the change is made under the key's lock), never under one it read before
// the change and applied after it (docs/design.md §3c).
func (g *Geometry) SetLimit(r Ring, limit int64) bool {
	if g.log {
		return g.logSetLimit(r, limit)
	}
	if g.IsBucket() {
		return false // the engine refuses per-key limits with a bucket
	}
	lw := r.word(g.limitAt)
	for {
		w := lw.Load()
		if pack.CountOfWord(w) == limit {
			break // no change: in-flight decisions stay valid
		}
		if lw.CompareAndSwap(w, pack.Word(pack.TagOfWord(w)+1, limit)) { // the version wraps mod 2^24
			break
		}
	}
	return !g.Retired(r)
}

// limitHeld reports whether a decision may keep its admission: it read the
// limit word as was before its CAS and as now after it, and decided under
// limit ≤ was's limit. It may if the word is unchanged (no change between
// the two loads), or if exactly one change came between (the version moved
// by one) and set a limit no lower than limit. Either way every limit in
// force between the two loads, the one at the CAS among them, is at least
// limit (docs/design.md §3c).
func limitHeld(was, now, limit int64) bool {
	return now == was || (pack.TagOfWord(now)-pack.TagOfWord(was))&tagMask == 1 && pack.CountOfWord(now) >= limit
}

// index returns the slot index of epoch e ≥ 0.
func (g *Geometry) index(e int64) int {
	_, i := g.bySlots.divmod(e)
	return int(i)
}

// Result is the outcome of one decision on a ring.
//
// It has four fields, Verdict counting as one: the compiler keeps a struct
// of at most four fields in registers, and a fifth turned every return of a
// Result into a copy through the stack, with a store-forwarding stall in
// each frame of the decision path (about a quarter of a hot key's time).
// result_test.go pins the count.
type Result struct {
	Verdict
	Remaining  int64 // units that would still be admitted now
	RetryAfter int64 // ns; 0 when allowed, Never when the request can never fit
	// Epoch is the effective epoch of the decision (a log: the effective
	// time, ns): t's, or the key's newest if t was older. Acquire and Peek
	// set it, Admit does not.
	Epoch int64
}

// Verdict is what a decision did.
type Verdict struct {
	Allowed bool
	Dead    bool // no decision was made on this ring: reload the key's ring (and limit) and retry
	// Stale, always with Dead: the ring is live, but its limit was lowered
	// below the caller's, or changed more than once, while the decision ran
	// (Acquire); nothing was recorded. Reload the limit and retry on the
	// same ring; do not replace it.
	Stale bool
}

// view is a ring read at effective epoch e: the current slot's word and its
// counted units, and the counts of the other slots by weight class.
type view struct {
	curWord int64
	cur     int64 // count of epoch e
	full    int64 // counts of e−1 … e−N+1, and e−N too when unweighted
	old     int64 // count of e−N when weighted
}

// read takes a view at epoch e, whose slot index is i, given that last was
// l ≤ e when loaded (e = l for a writer; a Peek may look ahead). It reports
// false when the current slot holds another epoch and last has moved since:
// the caller's epoch may be stale, so it must re-clamp before it writes.
// Otherwise a current slot with another tag holds an older epoch (no slot
// is newer than last, which was l after the slot was read), and counts 0.
// Any other slot whose tag is not the expected one counts 0: older data is
// outside the window, and newer data belongs to a writer that published a
// newer last, which Acquire's final check catches.
//
// Readers may miss units added concurrently; the writer protocol in Acquire
// makes that safe. A slot is never counted twice.
func (g *Geometry) read(r Ring, e int64, i int, l int64) (v view, ok bool) {
	tag := pack.TagOf(e)
	v.curWord = r.word(g.hdr + i).Load()
	if t := pack.TagOfWord(v.curWord); t == tag {
		v.cur = pack.CountOfWord(v.curWord)
	} else if r.word(wordLast).Load() != l {
		return v, false
	}
	// Epochs e−1 … e−N live at slots i−1 … 0, then N … i+1; the last
	// one visited is e−N, the weighted one.
	want, c := tag, int64(0)
	for j := g.hdr + i - 1; j >= g.hdr; j-- {
		want = (want - 1) & tagMask
		c = 0
		if w := r.word(j).Load(); pack.TagOfWord(w) == want {
			c = pack.CountOfWord(w)
		}
		v.full += c
	}
	for j := g.hdr + int(g.slots) - 1; j > g.hdr+i; j-- {
		want = (want - 1) & tagMask
		c = 0
		if w := r.word(j).Load(); pack.TagOfWord(w) == want {
			c = pack.CountOfWord(w)
		}
		v.full += c
	}
	if g.weighted && g.span > 0 {
		v.full -= c
		v.old = c
	}
	return v, true
}

// settle clears every slot whose epoch lags the epoch it stands for at e by
// staleAfter or more: the writer that moved last to e calls it, once per
// sub-window per key, so that stale slots are zeroed on the writers' own
// path and never by a background sweep. A cleared slot holds (tag of the
// epoch it stands for, 0): that epoch is before e, so no writer can add to
// it any more except one whose final check then undoes the add. The CAS is
// from the exact word read, so a concurrent writer's update wins; the loop
// ends when the slot is recent, which another writer's success also makes
// it. It then does the same for the cache words (settleCache). docs/design.md
// §3 proves the bound this keeps.
func (g *Geometry) settle(r Ring, e int64) {
	i := g.index(e)
	want := pack.TagOf(e)
	for k := 0; k < int(g.slots); k++ {
		s := r.word(g.hdr + i)
		for {
			w := s.Load()
			if pack.Diff(want, pack.TagOfWord(w)) < staleAfter {
				break // recent, or newer than e (a writer ahead of us)
			}
			if s.CompareAndSwap(w, pack.Word(want, 0)) {
				break
			}
		}
		if i--; i < 0 {
			i = int(g.slots) - 1
		}
		want = (want - 1) & tagMask
	}
	g.settleCache(r, e)
}

// oldest returns the slot index of epoch e−N, given e's index i.
func oldest(i, slots int) int {
	if i+1 == slots {
		return 0
	}
	return i + 1
}

const tagMask = 1<<pack.TagBits - 1

// fits reports whether full + n + old·(w−r)/w ≤ limit, exactly (0 ≤ r < w),
// for any n (a negative n never fits). Unweighted geometries have old = 0.
// n is compared with the room, never added: docs/design.md §1.
func (g *Geometry) fits(full, old, n, limit, r int64) bool {
	// No wrap: full < 2^50 and limit < 2^40. A negative n reads as above
	// 2^63 in the unsigned compare, so it never fits either.
	room := limit - full
	if room < 0 || uint64(n) > uint64(room) {
		return false
	}
	room -= n // 0 ≤ room − n ≤ room
	if old <= room {
		return true // old·(w−r)/w ≤ old
	}
	if !g.weighted {
		return false
	}
	// old·(w−r) ≤ room·w, both products below 2^104.
	h1, l1 := bits.Mul64(uint64(old), uint64(g.width-r))
	h2, l2 := bits.Mul64(uint64(room), uint64(g.width))
	return h1 < h2 || h1 == h2 && l1 <= l2
}

// remaining returns the largest m with full + m + old·(w−r)/w ≤ limit, or 0.
func (g *Geometry) remaining(full, old, limit, r int64) int64 {
	used := full + old
	if g.weighted && old > 0 && r > 0 {
		// ceil(old·(w−r)/w); the quotient fits because old·(w−r) < old·w.
		hi, lo := bits.Mul64(uint64(old), uint64(g.width-r))
		q, rem := bits.Div64(hi, lo, uint64(g.width))
		if rem != 0 {
			q++
		}
		used = full + int64(q)
	}
	if used >= limit {
		return 0
	}
	return limit - used
}

// EpochOf returns the epoch of t ≥ 0 (a log: t itself), the unit of
// Result.Epoch.
func (g *Geometry) EpochOf(t int64) int64 {
	if g.special {
		return t
	}
	e, _ := g.split(t)
	return e
}

// split returns the epoch and offset of t ≥ 0.
func (g *Geometry) split(t int64) (e, r int64) { return g.byWidth.divmod(t) }

// clamp returns the effective epoch and offset for a decision at t, given
// the ring's newest epoch l: time never runs backwards for a key, so a t
// older than l's sub-window is treated as the start of that sub-window.
func clamp(e, r, l int64) (int64, int64) {
	if e < l {
		return l, 0
	}
	return e, r
}

// Acquire admits n units at time t (Unix ns, ≥ 0) iff they fit under limit,
// and records them. Preconditions: 1 ≤ n ≤ limit ≤ 2^40 − 1.
//
// With per-key limits, limit is the ring's limit as the caller read it
// (Limit). If the ring's limit is lowered below it before the decision is
// made (read again after the CAS, step 5), nothing is recorded and the
// Result is Stale: the caller reads the limit again and retries. So an
// admission fits the limit in force at its CAS, the point where §3's
// argument orders it (docs/design.md §3c).
//
// The protocol (docs/design.md §3), for each attempt:
//  1. Load last, l. If t's epoch is newer, publish it with a CAS (once per
//     sub-window per key) and settle the ring at it; if older, clamp to l.
//     From here the writer's epoch e equals l.
//  2. Read the cache words and the current slot when the cache is tagged e
//     (cache.go); otherwise read every slot and publish the settled part in
//     the cache. If the request does not fit, deny: a denial writes nothing
//     but that once-per-sub-window publish, so the deny path scales.
//  3. CAS the current slot from the word read to word+n, or, if the slot
//     holds another epoch, to a fresh (tag, n): a reset, made only after
//     last was seen still equal to l once the slot was read. On CAS failure
//     re-read that slot only.
//  4. Load last again. If it moved, a writer at a newer epoch may have read
//     our slot before our add, so undo the add, mark the cache words that
//     may have counted it, and retry at the new epoch.
//  5. Per-key limits: load the limit word again. Unless it still says
//     that every limit in force since the first load (made before the
//     loop) was at least limit, undo the add, mark the cache
//     words if last has moved meanwhile (as Cancel does), and return Stale.
//
// Why this admits no more than a sequential execution would: order admitted
// requests by their CAS in step 3. For an earlier admitted request P and a
// later one Q: if both are in one sub-window, Q's CAS started from a word
// that includes P. If P's epoch is older, P's step 4 saw last at P's epoch,
// before last reached Q's epoch, which Q observed before its reads in step
// 2; so Q read P's slot after P's add. P's epoch cannot be newer, because Q's
// step 4 would then have seen last move. Units that are added and then
// undone can only make a concurrent reader over-count: under contention a
// request may be denied that a sequential run would admit (a false denial),
// never the reverse. The cache stands in for the settled slots: it bounds
// every admitted unit of them for any writer that is still admitted
// (cache.go), so the argument holds through it.
//
// Why no writer wipes a newer count: a reset replaces a word whose epoch is
// not e. The slot was read, then last was seen equal to l = e, and no slot
// holds an epoch newer than last, so the word's epoch was older than e:
// outside e's window and every later one. A writer whose view went stale
// (last moved after its clamp) sees last ≠ l and re-clamps instead. The CAS
// is from the exact word read, so the reset fails if the slot changed in
// between, unless it changed back to the same word, which takes 2^24
// sub-windows of the key's time between two of the writer's instructions
// (docs/design.md §3, the one stall the protocol does not survive).
func (g *Geometry) Acquire(r Ring, t, n, limit int64) Result {
	return g.acquire(r, t, n, limit, true)
}

// Admit is Acquire for callers that only need the verdict: it skips
// Remaining and RetryAfter (a walk over the slots and a 128-bit division on
// a denial), which leaves the deny path a read of the slots and nothing more.
func (g *Geometry) Admit(r Ring, t, n, limit int64) (allowed, dead bool) {
	res := g.acquire(r, t, n, limit, false)
	return res.Allowed, res.Dead
}

func (g *Geometry) acquire(r Ring, t, n, limit int64, detail bool) Result {
	if g.special { // the one branch the counter rings pay for the log and the bucket
		if g.log {
			return g.logAcquire(r, t, n, limit, detail)
		}
		return g.bucketAcquire(r, t, n, detail)
	}
	e0, r0 := g.split(t)
	// t's slot, computed before last is loaded: in the common case (t in
	// the key's newest sub-window) the slot's address then does not wait
	// for that load.
	i0 := g.index(e0)
	last := r.word(wordLast)
	// The limit word as the decision starts, for step 5: if the limit was
	// lowered since the caller read it, the caller must read it again.
	var lw int64
	if g.limitAt != 0 {
		if lw = r.word(g.limitAt).Load(); pack.CountOfWord(lw) < limit {
			return Result{Verdict: Verdict{Dead: true, Stale: true}}
		}
	}
	for {
		l := last.Load()
		if l < 0 {
			return Result{Verdict: Verdict{Dead: true}}
		}
		if e0 > l {
			if e0-l >= reviveGap {
				// Idle so long that slots could lag past the tags'
				// range: retire the ring at e0. Its replacement starts
				// at e0, so writers still at the old time are clamped
				// forward rather than counted on an empty ring.
				if last.CompareAndSwap(l, retiredWord(e0)) {
					return Result{Verdict: Verdict{Dead: true}}
				}
				continue
			}
			if !last.CompareAndSwap(l, e0) {
				continue
			}
			l = e0
			g.settle(r, e0)
		}
		e, off := clamp(e0, r0, l)
		if g.testHookClamped != nil {
			g.testHookClamped(e)
		}
		i := i0
		if e != e0 {
			i = g.index(e)
		}
		slot := r.word(g.hdr + i)
		tag := pack.TagOf(e)
		// The cache check (cacheAt, written out: the compiler would not
		// inline it). full and old are (tag, 0) where the geometry has no
		// such word, so that Fixed always hits with nothing settled.
		var v view
		full := pack.Word(tag, 0)
		old := full
		if g.cache > 0 {
			full = r.word(wordFull).Load()
		}
		if g.cache > 1 {
			old = r.word(wordOld).Load()
		}
		if w := pack.Word(tag, 0); uint64((full^w)|(old^w))>>pack.CountBits == 0 {
			v.full, v.old = pack.CountOfWord(full), pack.CountOfWord(old)
			v.curWord = slot.Load()
			if pack.TagOfWord(v.curWord) == tag {
				v.cur = pack.CountOfWord(v.curWord)
			} else if last.Load() != l {
				continue // as in read: the slot may be newer than our epoch
			}
		} else {
			var ok bool
			if v, ok = g.walk(r, e, i, l, full, old); !ok {
				continue
			}
		}
		restart := false
		for {
			if !g.fits(v.cur+v.full, v.old, n, limit, off) {
				if !detail {
					return Result{}
				}
				return g.deny(r, t, e, i, off, v, n, limit)
			}
			next := pack.Word(tag, v.cur+n) // v.cur is 0 when the slot is stale: a reset
			if slot.CompareAndSwap(v.curWord, next) {
				break
			}
			// Another writer changed the current slot; the other slots'
			// counts stay valid (step 4 covers newer epochs). A reset
			// needs last unchanged since the slot was read.
			w := slot.Load()
			v.curWord, v.cur = w, 0
			if pack.TagOfWord(w) == tag {
				v.cur = pack.CountOfWord(w)
			} else if last.Load() != l {
				restart = true
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
				// Retired: the sweeper saw last = l idle, so this add
				// at l is outside the window at the retirement epoch
				// and the ring is unreachable; it needs no undo. The
				// caller retries on the key's new ring.
				return Result{Verdict: Verdict{Dead: true}}
			}
			g.undo(slot, tag, n)
			g.invalidate(r, tag)
			continue
		}
		if g.limitAt != 0 {
			if lw2 := r.word(g.limitAt).Load(); !limitHeld(lw, lw2, limit) {
				// Lowered meanwhile: the limit at our CAS may have been
				// the lower one. Our add is not an admission; others
				// that counted it may deny falsely, as around any undo.
				g.undo(slot, tag, n)
				if last.Load() != l {
					g.invalidate(r, tag) // a walk at a later epoch may have counted it
				}
				return Result{Verdict: Verdict{Dead: true, Stale: true}}
			}
		}
		if !detail {
			return Result{Verdict: Verdict{Allowed: true}}
		}
		return Result{Verdict: Verdict{Allowed: true}, Remaining: g.remaining(v.cur+n+v.full, v.old, limit, off), Epoch: e}
	}
}

// undo subtracts n from slot while it still holds tag; a slot already reset
// to a newer epoch has nothing of ours left to undo.
func (g *Geometry) undo(slot *atomic.Int64, tag pack.Tag, n int64) {
	for {
		w := slot.Load()
		if pack.TagOfWord(w) != tag || pack.CountOfWord(w) < n {
			return
		}
		if slot.CompareAndSwap(w, w-n) {
			return
		}
	}
}

// Peek reports what Acquire would decide for n units at t, without
// recording anything. With n = 0 it reports Remaining. Any n is allowed: a
// negative n, or one above limit, is refused with RetryAfter Never, and no
// n is ever added to a count (fits).
func (g *Geometry) Peek(r Ring, t, n, limit int64) Result {
	if g.special {
		if g.log {
			return g.logPeek(r, t, n, limit)
		}
		return g.bucketPeek(r, t, n)
	}
	e0, r0 := g.split(t)
	for {
		l := r.word(wordLast).Load()
		if l < 0 {
			return Result{Verdict: Verdict{Dead: true}}
		}
		e, off := clamp(e0, r0, l)
		i := g.index(e)
		var v view // empty when nothing of the ring is inside the window at t
		if e0-l <= g.span {
			var ok bool
			if v, ok = g.read(r, e, i, l); !ok {
				continue
			}
		}
		if !g.fits(v.cur+v.full, v.old, n, limit, off) {
			return g.deny(r, t, e, i, off, v, n, limit)
		}
		return Result{Verdict: Verdict{Allowed: true}, Remaining: g.remaining(v.cur+v.full, v.old, limit, off), Epoch: e}
	}
}

// fromCaller turns a wait measured from a decision's effective time eff
// into one measured from the caller's time t ≤ eff (earlier when the
// request was clamped to the key's newest time): the retry instant eff +
// wait, minus t. A retry instant past int64 nanoseconds (2262-04-11) can
// never be asked for, so that wait is Never, as is a wait that is Never.
func fromCaller(wait, eff, t int64) int64 {
	if wait == Never || wait > math.MaxInt64-eff {
		return Never
	}
	return eff + wait - t
}

// deny builds the denial for n units asked at t and decided at (e, off)
// from view v; i is e's slot. Its RetryAfter counts from t.
func (g *Geometry) deny(r Ring, t, e int64, i int, off int64, v view, n, limit int64) Result {
	res := Result{Remaining: g.remaining(v.cur+v.full, v.old, limit, off), RetryAfter: Never, Epoch: e}
	if n >= 0 && n <= limit { // else it never fits, and retryAfter's room would wrap
		res.RetryAfter = fromCaller(g.retryAfter(r, e, i, off, v, n, limit), e*g.width+off, t)
	}
	return res
}

// retryAfter returns the least wait, in ns, after which n units fit at the
// key if nothing else is admitted meanwhile. At epoch e+j the window holds
// epochs e+j−N … e, of which e+j−N is the weighted one, so each step drops
// one more slot of the view. It re-reads the older slots; under concurrent
// traffic the answer is advisory.
func (g *Geometry) retryAfter(r Ring, e int64, i int, off int64, v view, n, limit int64) int64 {
	full := v.cur + v.full // counted in full at j = 0, including e−N when unweighted
	old := v.old
	idx, x := oldest(i, int(g.slots)), e-g.span // the slot and epoch leaving next
	for j := int64(0); j <= g.span+1; j++ {
		if j > 0 {
			if g.weighted {
				// Epoch x+1 becomes the weighted one; x leaves.
				if idx++; idx == int(g.slots) {
					idx = 0
				}
				x++
				old = g.countIn(r, idx, x, e)
				full -= old
			} else {
				full -= g.countIn(r, idx, x, e)
				if idx++; idx == int(g.slots) {
					idx = 0
				}
				x++
			}
		}
		room := limit - full - n // no wrap: 1 ≤ n ≤ limit (deny), and |full| < 2^50
		if room < 0 {
			continue
		}
		if old <= room {
			if j == 0 {
				continue // it did not fit at off, and nothing decays
			}
			return j*g.width - off
		}
		// Weighted only (unweighted has old = 0): need old·(w−r') ≤ room·w,
		// i.e. r' ≥ w − floor(room·w/old).
		hi, lo := bits.Mul64(uint64(room), uint64(g.width))
		q, _ := bits.Div64(hi, lo, uint64(old)) // room < old, so q < w
		rp := g.width - int64(q)
		if j == 0 && rp < off {
			rp = off
		}
		if rp < g.width {
			return j*g.width + rp - off
		}
	}
	// Reached only when concurrent writers changed slots between the view
	// and the re-reads above. By epoch e+N+1 every unit of the view has
	// left the window, and n ≤ limit fits an empty one: a true bound, never
	// Never for a request that can fit.
	return (g.span+1)*g.width - off
}

// countIn returns the count of epoch x, held in slot idx, as seen at epoch
// e: 0 when x is after e or the slot holds another epoch.
func (g *Geometry) countIn(r Ring, idx int, x, e int64) int64 {
	if x > e || x < 0 {
		return 0
	}
	w := r.word(g.hdr + idx).Load()
	if pack.TagOfWord(w) != pack.TagOf(x) {
		return 0
	}
	return pack.CountOfWord(w)
}

// Retire retires r if it is still idle at t: if the key's newest request
// is more than Window plus one sub-window before t (FixedWindow, whose
// sub-window is the window: 2·Window; a log: more than Window); a writer
// that publishes a newer epoch first wins, and then the ring stays. The
// ring is retired at the epoch l + N + 1 after its newest l, where the last
// of its counts has left the window (a log: at its newest time plus W), so
// a replacement starts no earlier (RetiredAt); that is on the key's own
// timeline, and before t.
//
// It reports whether r is retired at or before t, by this call or by
// anyone: then a sweeper at t may remove it from the key table. A ring that
// a far-ahead writer retired (Acquire's revive gap) at a time after t
// reports false: only that writer's Replace, which starts the new ring
// there, may take it out before t reaches it; a sweeper that deleted it
// would let a writer at the key's present time create a ring at its own
// time, below counts still inside its window, and would raise the table's
// floor past the clock (docs/design.md §5). A t < 0 (a clock outside
// 1970 … 2262) judges nothing.
func (g *Geometry) Retire(r Ring, t int64) bool {
	if t < 0 {
		return false // a clock outside 1970 … 2262 judges nothing idle
	}
	if g.log {
		return g.logRetire(r, t)
	}
	if g.special {
		return g.bucketRetire(r, t)
	}
	e, _ := g.split(t)
	last := r.word(wordLast)
	for {
		l := last.Load()
		if l < 0 {
			return retiredAt(l) <= e
		}
		// Epoch l ends at (l+1)·w; idle for more than W + w needs
		// t ≥ (l+1)·w + W + w, that is e ≥ l + W/w + 2.
		if e-l < g.idle {
			return false
		}
		if last.CompareAndSwap(l, retiredWord(l+g.slots)) { // l + N + 1 < l + idle ≤ e
			return true
		}
	}
}

// Newest returns the start (Unix ns) of r's newest sub-window (a log: its
// newest time), or −1 when r is retired. It only grows, so a decision made
// on r after this read is made at or after the time it returns (the
// self-audit orders a cancellation by it).
func (g *Geometry) Newest(r Ring) int64 {
	if g.IsBucket() {
		if r.word(bucketTAT).Load() >= 0 {
			return r.word(bucketBase).Load()
		}
		return -1
	}
	if g.log {
		if l := r.word(logLast).Load(); l >= 0 {
			return l
		}
		return -1
	}
	if l := r.word(wordLast).Load(); l >= 0 {
		return l * g.width
	}
	return -1
}

// Retired reports whether r has been retired.
func (g *Geometry) Retired(r Ring) bool { return r.word(wordLast).Load() < 0 }

// RetiredAt returns the time (Unix ns) at which a retired ring r was
// retired: the start of the epoch it was retired at (a log: the time). No
// count of r is inside the window there; a replacement ring must start at
// or after it, so that no writer whose time is older counts on an empty
// ring while the old ring's counts would still be inside its window. For a
// live ring it returns 0.
func (g *Geometry) RetiredAt(r Ring) int64 {
	l := r.word(wordLast).Load()
	if l >= 0 {
		return 0
	}
	if g.log {
		return retiredAt(l)
	}
	if g.special {
		return g.bucketFullAt(r, retiredAt(l))
	}
	return retiredAt(l) * g.width
}

// Pointer returns the address of r's state, for a cache that holds rings
// by address (package shard's hints). A state is at least 64 bytes.
func (r Ring) Pointer() unsafe.Pointer { return unsafe.Pointer(r.p) }

// RingAt returns the Ring whose state is at p, an address Pointer returned.
func RingAt(p unsafe.Pointer) Ring { return Ring{p: (*atomic.Int64)(p)} }
