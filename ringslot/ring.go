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
	plain    bool   // a counter ring with shared limits: Acquire tries fast first
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
	g.plain = !perKey
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
	g.initRing(w, t, limit)
	return Ring{p: &w[0]}
}

// initRing writes a new counter ring's words into the zeroed w (New).
func (g *Geometry) initRing(w []atomic.Int64, t, limit int64) {
	e := t / g.width
	w[wordLast].Store(e)
	for k := range g.cache {
		w[wordFull+k].Store(pack.Word(pack.TagOf(e), 0))
	}
	if g.limitAt != 0 {
		w[g.limitAt].Store(limit)
	}
}

// word returns the i-th word; i < g.words by construction.
func (r Ring) word(i int) *atomic.Int64 {
	return (*atomic.Int64)(unsafe.Add(unsafe.Pointer(r.p), uintptr(i)*8))
}

// Valid reports whether r refers to a ring.
func (r Ring) Valid() bool { return r.p != nil }

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

// index returns the slot index of epoch e ≥ 0.
func (g *Geometry) index(e int64) int {
	_, i := g.bySlots.divmod(e)
	return int(i)
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

// Pointer returns the address of r's state, for a cache that holds rings
// by address (package shard's hints). A state is at least 64 bytes.
func (r Ring) Pointer() unsafe.Pointer { return unsafe.Pointer(r.p) }

// RingAt returns the Ring whose state is at p, an address Pointer returned.
func RingAt(p unsafe.Pointer) Ring { return Ring{p: (*atomic.Int64)(p)} }
