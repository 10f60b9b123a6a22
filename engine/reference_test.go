package engine_test

import (
	"math/big"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// refEvent is one admitted request in the reference log, at its effective
// time (after clamping) in Unix nanoseconds.
type refEvent struct{ t, n int64 }

// refKey is the reference state of one key: an exact sliding log of what was
// admitted, plus the newest sub-window the key has seen.
type refKey struct {
	log    []refEvent
	newest int64 // newest epoch seen by a recording request (SlidingLog: newest time)
	exists bool
}

// refLimiter is the independent reference model. It derives every count
// from the exact log with big.Rat arithmetic and finds RetryAfter by search,
// sharing no code with the engine.
type refLimiter struct {
	limit int64
	win   int64 // W in ns
	n     int64 // sub-windows; 0 for fixed and log
	w     int64 // sub-window width (W for fixed; 1ns for log, whose clamp is to the exact newest time)
	alg   engine.Algorithm
	keys  map[string]*refKey
}

func newRef(cfg engine.Config) *refLimiter {
	n := int64(cfg.SubWindows)
	if n == 0 {
		n = engine.DefaultSubWindows
	}
	r := &refLimiter{limit: cfg.Limit, win: int64(cfg.Window), n: n, alg: cfg.Algorithm, keys: map[string]*refKey{}}
	switch cfg.Algorithm {
	case engine.FixedWindow:
		r.n = 0
		r.w = r.win
	case engine.SlidingLog:
		r.n = 0
		r.w = 1
	default:
		r.w = r.win / n
	}
	return r
}

// sub returns Σ n of logged events whose sub-window is x.
func (r *refLimiter) sub(k *refKey, x int64) int64 {
	var s int64
	for _, ev := range k.log {
		if ev.t/r.w == x {
			s += ev.n
		}
	}
	return s
}

// estimate returns the algorithm's estimate at t as an exact rational.
func (r *refLimiter) estimate(k *refKey, t int64) *big.Rat {
	e, off := t/r.w, t%r.w
	est := new(big.Rat)
	switch r.alg {
	case engine.SlidingLog:
		// Exact: every unit admitted at s with t−W < s ≤ t.
		var s int64
		for _, ev := range k.log {
			if ev.t > t-r.win && ev.t <= t {
				s += ev.n
			}
		}
		est.SetInt64(s)
	case engine.FixedWindow:
		est.SetInt64(r.sub(k, e))
	case engine.SlidingWindowStrict:
		for x := e - r.n; x <= e; x++ {
			est.Add(est, big.NewRat(r.sub(k, x), 1))
		}
	default:
		for x := e - r.n + 1; x <= e; x++ {
			est.Add(est, big.NewRat(r.sub(k, x), 1))
		}
		old := new(big.Rat).Mul(big.NewRat(r.sub(k, e-r.n), 1), big.NewRat(r.w-off, r.w))
		est.Add(est, old)
	}
	return est
}

func (r *refLimiter) fits(k *refKey, t, n int64) bool {
	est := r.estimate(k, t)
	est.Add(est, big.NewRat(n, 1))
	return est.Cmp(big.NewRat(r.limit, 1)) <= 0
}

// remaining is floor(limit − estimate), at least 0.
func (r *refLimiter) remaining(k *refKey, t int64) int64 {
	room := new(big.Rat).Sub(big.NewRat(r.limit, 1), r.estimate(k, t))
	if room.Sign() <= 0 {
		return 0
	}
	q := new(big.Int).Quo(room.Num(), room.Denom()) // floor for positive
	return q.Int64()
}

// decide mirrors Engine.AllowAt.
func (r *refLimiter) decide(key string, n int64, now time.Time) engine.Decision {
	t := now.UnixNano()
	asked := t
	k := r.keys[key]
	if k == nil {
		k = &refKey{}
	}
	// Time never runs backwards: clamp to the start of the newest sub-window.
	if k.exists && t/r.w < k.newest {
		t = k.newest * r.w
	}
	d := engine.Decision{Limit: r.limit}
	switch {
	case n < 0:
		d.RetryAfter = engine.Never
		d.Remaining = r.remaining(k, t)
		return d
	case n > r.limit:
		d.RetryAfter = engine.Never
		d.Remaining = r.remaining(k, t)
		return d
	case n == 0:
		d.Allowed = true
		d.Remaining = r.remaining(k, t)
		return d
	}
	r.keys[key] = k
	k.exists = true
	if e := t / r.w; e > k.newest {
		k.newest = e
	}
	if r.fits(k, t, n) {
		k.log = append(k.log, refEvent{t, n})
		d.Allowed = true
		d.Remaining = r.remaining(k, t)
		return d
	}
	d.Remaining = r.remaining(k, t)
	// The estimate never grows without traffic, so the least fitting wait
	// can be found by bisection; within W + one sub-window it always fits.
	lo, hi := int64(0), r.win+r.w
	for lo < hi {
		mid := lo + (hi-lo)/2
		if r.fits(k, t+mid, n) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	// Counted from now, not from the clamped t: a retry at now + RetryAfter
	// is a request at t + lo.
	d.RetryAfter = time.Duration(t + lo - asked)
	return d
}

// maxInWindow returns the largest number of units the log holds in any
// window (t−W, t] — the true count an exact sliding log would see.
func maxInWindow(log []refEvent, win int64) int64 {
	var best int64
	for _, end := range log {
		var s int64
		for _, ev := range log {
			if ev.t > end.t-win && ev.t <= end.t {
				s += ev.n
			}
		}
		if s > best {
			best = s
		}
	}
	return best
}
