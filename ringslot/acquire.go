package ringslot

import (
	"sync/atomic"

	"github.com/ringlimit/ringlimit/internal/pack"
)

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
	return g.fast(r, t, n, limit, true)
}

// Admit is Acquire for callers that only need the verdict: it skips
// Remaining and RetryAfter (a walk over the slots and a 128-bit division on
// a denial), which leaves the deny path a read of the slots and nothing more.
func (g *Geometry) Admit(r Ring, t, n, limit int64) (allowed, dead bool) {
	res := g.fast(r, t, n, limit, false)
	return res.Allowed, res.Dead
}

// fast is acquire's first attempt in its common case, written apart so
// that it runs in registers (the general loop's calls make the compiler
// keep its values on the stack): a counter ring with shared limits, t in
// the key's newest sub-window (e = l, so no publish, settle or clamp), the
// cache and the current slot tagged e, and an uncontended CAS. It makes
// exactly the loads, the CAS and the checks of acquire's first iteration in
// that case. Wherever acquire would take another branch or loop, it hands
// the decision to acquire: before its CAS, having written nothing; after
// it, once it has undone its add as acquire does before it retries. acquire
// then starts a fresh attempt, as its own loop would, so the argument above
// holds unchanged.
func (g *Geometry) fast(r Ring, t, n, limit int64, detail bool) Result {
	if !g.plain || g.testHookClamped != nil { // the stall tests' hook: they drive acquire
		if g.special { // straight to the log or the bucket: one frame, as before fast
			if g.log {
				return g.logAcquire(r, t, n, limit, detail)
			}
			return g.bucketAcquire(r, t, n, detail)
		}
		return g.acquire(r, t, n, limit, detail)
	}
	// From here t is passed on as e·w + off, which it equals, so that the
	// compiler need not keep it in a register as well.
	e, off := g.split(t)
	last := r.word(wordLast)
	if last.Load() != e { // retired (< 0), behind t (publish), or ahead (clamp)
		return g.acquire(r, e*g.width+off, n, limit, detail)
	}
	slot := r.word(g.hdr + g.index(e))
	tag := pack.Word(pack.TagOf(e), 0)
	full, old := tag, tag
	if g.cache > 0 {
		full = r.word(wordFull).Load()
	}
	if g.cache > 1 {
		old = r.word(wordOld).Load()
	}
	cur := slot.Load()
	if uint64((full^tag)|(old^tag)|(cur^tag))>>pack.CountBits != 0 {
		// The cache is behind (a walk), or the slot holds an older
		// epoch (a reset).
		return g.acquire(r, e*g.width+off, n, limit, detail)
	}
	v := view{curWord: cur, cur: pack.CountOfWord(cur), full: pack.CountOfWord(full), old: pack.CountOfWord(old)}
	if !g.fits(v.cur+v.full, v.old, n, limit, off) {
		if !detail {
			return Result{}
		}
		return g.deny(r, e*g.width+off, e, g.index(e), off, v, n, limit)
	}
	// cur+n = pack.Word(tag, v.cur+n): fits bounds v.cur+n by limit < 2^40.
	if !slot.CompareAndSwap(cur, cur+n) {
		return g.acquire(r, e*g.width+off, n, limit, detail)
	}
	if g.testHookAdded != nil {
		g.testHookAdded(e)
	}
	if last.Load() != e {
		return g.retry(r, slot, e, off, n, limit, detail)
	}
	if !detail {
		return Result{Verdict: Verdict{Allowed: true}}
	}
	return Result{Verdict: Verdict{Allowed: true}, Remaining: g.remaining(v.cur+n+v.full, v.old, limit, off), Epoch: e}
}

// retry is fast's path when last moved after its add: as acquire's step 4,
// nothing to undo on a retired ring (acquire then reports Dead), else undo
// the add and mark the cache words that may have counted it; then decide
// afresh.
func (g *Geometry) retry(r Ring, slot *atomic.Int64, e, off, n, limit int64, detail bool) Result {
	if r.word(wordLast).Load() >= 0 {
		g.undo(slot, pack.TagOf(e), n)
		g.invalidate(r, pack.TagOf(e))
	}
	return g.acquire(r, e*g.width+off, n, limit, detail)
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
