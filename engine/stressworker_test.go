package engine_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// beginChange records that key k's limit is about to become l, and returns
// the change's index (stressLimits).
func (s *stressRun) beginChange(k int, l int64) int64 {
	lim := &s.limits[k]
	lim.vals = append(lim.vals, l)
	j := lim.base + int64(len(lim.vals)) - 1
	if l < lim.vals[len(lim.vals)-2] {
		s.stats.lowered++
	}
	s.stats.limitChanges++
	lim.begun.Store(j)
	lim.cur.Store(l)
	return j
}

// worker runs stressOps random decisions. In a revive round every worker
// hammers key 0 at the present and the jumper keeps jumping it far ahead,
// which retires its ring: the race of a revival with present writers.
func (s *stressRun) worker(w int, rng *rand.Rand, far, refused, allowAll *atomic.Int64, jumper, revive bool) ([]stressRec, []int64) {
	var out []stressRec
	var gone []int64
	e, clk := s.e, s.clk
	for range stressOps {
		k := rng.IntN(stressKeys)
		op := rng.IntN(200)
		if revive {
			k = 0
			op = rng.IntN(70) // traced AllowAt at the present, or behind
			if jumper && rng.IntN(8) == 0 {
				op = 199
			}
		}
		if op == 199 && s.keyMax[k].Load() > stressTimeCap {
			op = 0 // far jumps stop before the end of representable time (2262)
		}
		key := fmt.Sprint("k", k)
		n := 1 + rng.Int64N(3)
		s.decided.Add(1)
		switch {
		case op < 90 || op == 199: // AllowAt, traced: forward jitter, backward (the clock, behind the key), or far ahead
			at := clk.UnixNano()
			switch {
			case op == 199:
				// Past the revive gap (the ring is retired and
				// replaced), or past settle's lag only (the ring stays
				// and its stale slots are cleared under pending
				// reservations).
				gap := int64(1 << 21)
				if rng.IntN(2) == 0 {
					gap = 1 << 20
				}
				at = s.keyMax[k].Load() + (gap+rng.Int64N(100))*s.width
				n = 1
				far.Add(1)
			case op < 70:
				at += rng.Int64N(s.width / 2)
			}
			atomicMax(&s.keyMax[k], at)
			sure := s.limits[k].start()
			d, eff := e.AllowAtTrace(key, n, time.Unix(0, at))
			begun := s.limits[k].end()
			if lo, hi := s.epochOf(at), s.hiBound(k); eff < lo || eff > hi {
				s.fail("%s AllowAt(%d) at %d: effective epoch %d outside [%d, %d]", key, n, at, eff, lo, hi)
			}
			s.checkDecision(key, n, d)
			if d.Allowed {
				out = append(out, stressRec{key: k, lo: eff, hi: eff, n: n, exact: true, sure: sure, begun: begun})
			}
		case op < 140: // Allow and AllowN on the engine's clock: bounded, not traced
			lo := s.epochOf(clk.UnixNano())
			sure := s.limits[k].start()
			var ok bool
			if op < 115 {
				n = 1
				ok = e.Allow(key)
			} else {
				d := e.AllowN(key, n)
				s.checkDecision(key, n, d)
				ok = d.Allowed
			}
			if ok {
				out = append(out, stressRec{key: k, lo: lo, hi: s.hiBound(k), n: n, sure: sure, begun: s.limits[k].end()})
			}
		case op < 150: // cold keys: thousands of them, reclaimed by racing sweeps after each idle jump
			e.Allow(fmt.Sprint("cold", rng.IntN(stressColdKeys)))
		case op < 163: // ReserveAt, traced through the Reservation, kept to cancel later
			at := clk.UnixNano() + rng.Int64N(s.width/2)
			atomicMax(&s.keyMax[k], at)
			if len(s.pending[w]) == 64 {
				s.pending[w] = s.pending[w][1:]
			}
			sure := s.limits[k].start()
			s.pending[w] = append(s.pending[w], stressPending{r: e.ReserveAt(key, n, time.Unix(0, at)), id: s.nextID.Add(1)})
			begun := s.limits[k].end()
			p := &s.pending[w][len(s.pending[w])-1]
			d := p.r.Decision()
			if !d.Allowed && rng.IntN(8) > 0 {
				s.pending[w] = s.pending[w][:len(s.pending[w])-1] // keep a few denied ones to cancel
			}
			s.checkDecision(key, n, d)
			if d.Allowed {
				eff := p.r.Epoch()
				if lo, hi := s.epochOf(at), s.hiBound(k); eff < lo || eff > hi {
					s.fail("%s ReserveAt(%d) at %d: effective epoch %d outside [%d, %d]", key, n, at, eff, lo, hi)
				}
				out = append(out, stressRec{key: k, lo: eff, hi: eff, n: n, exact: true, id: p.id, sure: sure, begun: begun})
			}
		case op < 168: // Cancel one of this worker's reservations, sometimes twice
			if len(s.pending[w]) == 0 {
				break
			}
			i := rng.IntN(len(s.pending[w]))
			if rng.IntN(3) > 0 { // mostly a recent one, whose sub-window is still inside
				i = max(0, len(s.pending[w])-1-rng.IntN(3))
			}
			p := &s.pending[w][i]
			if p.r.Cancel() {
				gone = append(gone, p.id)
				if p.r.Cancel() {
					s.fail("%s: a second Cancel of reservation %d returned its units again", p.r.Key(), p.id)
				}
			} else {
				refused.Add(1)
			}
			if rng.IntN(2) == 0 {
				s.pending[w] = slices.Delete(s.pending[w], i, i+1)
			}
		case op < 170: // AllowAll over two keys: both or neither
			k2 := (k + 1) % stressKeys
			key2 := fmt.Sprint("k", k2)
			at := clk.UnixNano()
			lo := s.epochOf(at)
			atomicMax(&s.keyMax[k], at)
			atomicMax(&s.keyMax[k2], at)
			sure, sure2 := s.limits[k].start(), s.limits[k2].start()
			i, d := engine.AllowAll(time.Unix(0, at), engine.Request{Engine: e, Key: key, N: n}, engine.Request{Engine: e, Key: key2, N: 1})
			begun, begun2 := s.limits[k].end(), s.limits[k2].end()
			allowAll.Add(1)
			if d.Allowed != (i < 0) {
				s.fail("AllowAll: index %d with %+v", i, d)
			}
			if i < 0 {
				out = append(out, stressRec{key: k, lo: lo, hi: s.hiBound(k), n: n, sure: sure, begun: begun},
					stressRec{key: k2, lo: lo, hi: s.hiBound(k2), n: 1, sure: sure2, begun: begun2})
			}
		case op < 175: // requests that record nothing
			bad := []int64{0, -1, -5, stressLimit + 1, 1 << 41}[rng.IntN(5)]
			d := e.AllowAt(key, bad, time.Unix(0, clk.UnixNano()))
			if bad == 0 && (!d.Allowed || d.RetryAfter != 0) || bad != 0 && (d.Allowed || d.RetryAfter != engine.Never) {
				s.fail("%s AllowAt(n=%d): %+v", key, bad, d)
			}
		default: // the workers move the clock
			clk.Advance(time.Duration(rng.Int64N(s.width / 4)))
		}
	}
	return out, gone
}
