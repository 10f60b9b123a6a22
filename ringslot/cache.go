package ringslot

import "github.com/ringlimit/ringlimit/internal/pack"

// The settled-window cache (docs/design.md §3a).
//
// At epoch e the window's estimate needs the counts of e−N … e−1 besides
// the current slot. Those epochs are settled: they can no longer gain an
// admitted unit, only lose units through undo. So a writer that walked the
// slots at e publishes what it found in two words (one for Strict, whose
// e−N counts in full; none for Fixed, which has nothing settled):
//
//	full: pack.Word(tag of e, c[e−1] + … + c[e−N+1])  (+ c[e−N] for Strict)
//	old:  pack.Word(tag of e, c[e−N])                 (weighted only)
//
// and every later decision at e reads last, the two words and the current
// slot instead of N+1 slots (acquire; the check is written out there). The walk runs once per key per sub-window (the
// first writer of the sub-window, or whichever writer first finds the cache
// behind), and on Peek.
//
// Claim: a writer D admitted at epoch e that used cache words tagged e
// counted, through them, at least every admitted unit of e−N … e−1 (e−N's
// count being compared in the weighted share as a slot's would be). So the
// cache can make D refuse a request a walk would admit (a false denial),
// never admit one a walk would refuse.
//
// Proof. D is admitted only if its final load of last reads e, after its
// reads of the cache words. Every cache word tagged e that D can read was
// written in one of four ways:
//
//  1. New, at the ring's first epoch e: (e, 0). Every writer of the ring
//     has an epoch ≥ the ring's first (older times are clamped), so no unit
//     is ever admitted at an older epoch of this ring: 0 is exact.
//  2. A publish by a writer C at e (publish). C loaded last = e, read the
//     cache words, walked the slots, then CASed. D read C's word after
//     that CAS, and D's final load, later still, saw last = e. last only
//     increases until retirement and then never changes, and D saw it
//     live, so last was e during all of C's walk. Now take an admitted
//     unit of an epoch x in e−N … e−1, added by a writer P. P's final load
//     saw last = x < e, so P's CAS came before last reached e, hence before
//     C's walk. While last = e, nothing takes an admitted unit out of slot
//     x: a reset of that slot needs a writer at x+N+1 > e or later; settle
//     clears only slots whose epoch lags by 2^20; undo removes only the
//     undoing writer's own units, which are not admitted. And slot x's tag
//     is x's (tags do not alias, §3). So C's walk counted every admitted
//     unit of x, and C's full and old are upper bounds of the admitted
//     counts. A walk may also count units that are later undone, and a
//     walk is not a snapshot; both only raise the sums.
//  3. A marker (settleCache, invalidate): pack.MaxCount. No writer is
//     ever admitted with it: every limit is at most MaxCount and n ≥ 1.
//     (It bounds every admitted count, which is at most a limit; with a
//     debt (Charge) the recorded counts can exceed it, but a writer that
//     reads it is refused all the same, as the true counts would refuse it.)
//  4. A publish or marker for another epoch whose tag equals e's: the tags
//     would alias. settleCache keeps every cache word's epoch within 2^23
//     of last exactly as settle does for slots, and every write is a CAS
//     from the exact word read while last was near its epoch, so this is
//     the stall the protocol already excludes (§3: 2^24 sub-windows inside
//     one writer's two instructions).
//
// The two words are written separately, so D may combine C1's full with
// C2's old; each is an upper bound of its own part, so the mix is one too.
// D's own slot is read and CASed as without the cache, so the ordering
// argument of §3 carries over: every admitted request saw every earlier
// admitted unit of its window, now through the cache for settled epochs.
// Strict and Fixed keep their estimate: Strict caches its full N slots
// before e in one word; Fixed has no settled epoch and no cache.
//
// Remaining on an admission and on a denial is computed from the same
// view; RetryAfter re-reads the settled slots (retryAfter), as before. A
// sequential run never undoes, so there the cache holds the exact counts
// and every decision equals a walk's.
//
// What undo leaves behind. A writer at x that adds to its slot after last
// moved on undoes its add; a walk at e in x+1 … x+N may have counted it
// meanwhile and published it, and that over-count would then refuse up to
// n units for the rest of sub-window e. So after its undo the writer
// replaces every cache word tagged up to x+N with a marker tagged x (x−1 if
// the word is marker(x) already, so that the word always changes):
// invalidate. The next writer at e finds the cache behind and walks again.
// A walk that saw the add read its slot before the undo, so its publisher
// loaded its word before the marker was written: its CAS either came first
// (the marker overwrites it) or fails on the changed word. One interleaving
// is left, an ABA on the word: the publisher's word was marker(x) from an
// earlier undo, a second publisher replaced it, and this undo writes
// marker(x) again before the first publisher's CAS. Then the over-count of
// one undone request stays for the rest of sub-window e: a false denial,
// like the ordinary one of a decision that runs during an add and its undo.

// marker is a cache word that any reader may take (an upper bound of every
// count), tagged x so that writers at epochs after x find it behind and
// publish over it.
func marker(x pack.Tag) int64 { return pack.Word(x, pack.MaxCount) }

// walk is read for a writer at e = l whose cache check missed, given the
// cache words it read (full0, old0); it publishes what it read. ok is false
// as for read: the current slot holds another epoch and last moved, so the
// writer must re-clamp.
//
//go:noinline
func (g *Geometry) walk(r Ring, e int64, i int, l int64, full0, old0 int64) (view, bool) {
	v, ok := g.read(r, e, i, l)
	if ok {
		if g.testHookWalked != nil {
			g.testHookWalked(e)
		}
		g.publish(r, pack.TagOf(e), full0, old0, v)
	}
	return v, ok
}

// publish stores a walk at epoch tag in the cache words, each by a CAS from
// the word read before the walk (full0, old0), and only over a word tagged
// before tag: a cache word's tag moves forward except for markers, and a
// publisher whose word changed under its walk (a marker from an undo, a
// settle, another publisher) leaves it alone. A sum beyond pack.MaxCount
// (units being undone on top of a full window, or debts: Charge) is not
// published, so writers at that epoch walk.
func (g *Geometry) publish(r Ring, tag pack.Tag, full0, old0 int64, v view) {
	if v.full <= pack.MaxCount && pack.Diff(tag, pack.TagOfWord(full0)) > 0 {
		r.word(wordFull).CompareAndSwap(full0, pack.Word(tag, v.full))
	}
	if g.cache == 2 && pack.Diff(tag, pack.TagOfWord(old0)) > 0 {
		r.word(wordOld).CompareAndSwap(old0, pack.Word(tag, v.old))
	}
}

// invalidate is called by a writer that undid an add at epoch tag x: every
// cache word tagged up to x+N, whose walk may have counted that add, becomes
// a marker. See "What undo leaves behind".
func (g *Geometry) invalidate(r Ring, x pack.Tag) {
	for k := range g.cache {
		c := r.word(wordFull + k)
		for {
			w := c.Load()
			if int64(pack.Diff(pack.TagOfWord(w), x)) > g.span {
				break // a walk at that epoch does not read x
			}
			m := marker(x)
			if w == m {
				m = marker((x - 1) & tagMask)
			}
			if c.CompareAndSwap(w, m) {
				break
			}
		}
	}
}

// settleCache is settle's step for the cache words: a word whose epoch lags
// e by staleAfter or more becomes marker(e−1), so that cache tags, like
// slot tags, stay within 2^23 of last and never alias (docs/design.md §3).
func (g *Geometry) settleCache(r Ring, e int64) {
	want := pack.TagOf(e)
	for k := range g.cache {
		c := r.word(wordFull + k)
		for {
			w := c.Load()
			if pack.Diff(want, pack.TagOfWord(w)) < staleAfter {
				break
			}
			if c.CompareAndSwap(w, marker((want-1)&tagMask)) {
				break
			}
		}
	}
}
