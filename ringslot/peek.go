package ringslot

import (
	"math"
	"math/bits"

	"github.com/ringlimit/ringlimit/internal/pack"
)

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
