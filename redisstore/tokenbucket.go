package redisstore

import (
	"fmt"
	"math"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// maxFill bounds the time a token bucket takes to fill from empty,
// Burst × Window/Limit, in µs (2^50 µs, about 35.7 years): a TAT is then
// at most TIME + maxFill + 1 µs, below 2^53 until the year 2219.
const maxFill = int64(1) << 50

// tbRate is one rate and burst as the token bucket's script takes them
// (see tbSource): the emission interval Window/Limit is p/q µs in lowest
// terms, and depth = Burst × p ticks of 1/q µs.
type tbRate struct {
	p, q, depth int64
}

// args is the script's ARGV for n units.
func (r tbRate) args(n int64) []any { return []any{n, r.p, r.q, r.depth} }

// newTBRate returns the script's rate for limit units per window (ns) and a
// bucket of burst units, or an error saying which exactness bound they
// break: depth + p + 2q ≤ 2^53, so that every integer the script forms is
// exact in a double, and depth/q < maxFill. limit and burst are in 1 …
// engine.MaxLimit and window > 0 (engine.New's validation).
func newTBRate(limit, burst int64, window time.Duration) (tbRate, error) {
	w, l := int64(window), 1000*limit // l < 2^50: no overflow
	g := gcd(w, l)
	r := tbRate{p: w / g, q: l / g}
	if r.p > MaxExact-2*r.q-r.p { // p + p + 2q > 2^53: not even Burst 1 fits
		return tbRate{}, fmt.Errorf("Window/Limit = %d/%d ns is p/q = %d/%d µs in lowest terms, and the script needs 2p + 2q ≤ 2^53 (a Window/Limit with a smaller numerator or denominator, e.g. a Window of whole µs)", w, limit, r.p, r.q)
	}
	maxBurst := (MaxExact - 2*r.q - r.p) / r.p
	if burst > maxBurst {
		return tbRate{}, fmt.Errorf("Burst = %d with Window/Limit = p/q = %d/%d µs in lowest terms: the script needs Burst × p + p + 2q ≤ 2^53, so Burst ≤ %d", burst, r.p, r.q, maxBurst)
	}
	r.depth = burst * r.p
	if r.depth/r.q >= maxFill {
		return tbRate{}, fmt.Errorf("Burst = %d with Window/Limit = %v/%d: the bucket fills in Burst × Window/Limit ≈ %v, want under 2^50 µs (about 35.7 years)", burst, window, limit, time.Duration(min(r.depth/r.q, math.MaxInt64/1000)*1000))
	}
	return r, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// tokenBucket is a token-bucket Limiter's configuration: the rate of
// Config.Limit, precomputed, and what a key's limit from KeyLimit turns
// into.
type tokenBucket struct {
	window time.Duration
	burst  int64 // Config.Burst; 0: the key's limit
	limit  int64 // Config.Limit
	def    tbRate
}

// newTokenBucket returns the token bucket of limit units per window with
// a bucket of burst units (0: limit), or newTBRate's error for them.
func newTokenBucket(limit, burst int64, window time.Duration) (*tokenBucket, error) {
	b := &tokenBucket{window: window, burst: burst, limit: limit}
	var err error
	b.def, err = newTBRate(limit, b.capacity(limit), window)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// capacity is the bucket's size for a key whose limit is limit.
func (b *tokenBucket) capacity(limit int64) int64 {
	if b.burst != 0 {
		return b.burst
	}
	return limit
}

// rate returns the script's rate for a key whose limit is limit, and
// whether it is exact (see newTBRate).
func (b *tokenBucket) rate(limit int64) (tbRate, bool) {
	if limit == b.limit {
		return b.def, true
	}
	r, err := newTBRate(limit, b.capacity(limit), b.window)
	return r, err == nil
}

// parse reads the script's reply (see tbSource) for a key whose limit is
// limit: the Decision, with Limit the bucket's capacity, and the Redis time
// it was made at.
func (b *tokenBucket) parse(res any, limit int64) (engine.Decision, time.Time, error) {
	a, ok := res.([]any)
	if !ok || len(a) != 5 {
		return engine.Decision{}, time.Time{}, fmt.Errorf("redisstore: unexpected token bucket script reply %v", res)
	}
	var v [5]int64
	for i := range a {
		x, ok := a[i].(int64)
		if !ok {
			return engine.Decision{}, time.Time{}, fmt.Errorf("redisstore: unexpected token bucket script reply %v", res)
		}
		v[i] = x
	}
	d := engine.Decision{Allowed: v[0] == 1, Limit: b.capacity(limit), Remaining: v[1]}
	if !d.Allowed {
		r, _ := b.rate(limit)
		d.RetryAfter = waitNs(v[2], v[3], r.q)
	}
	return d, time.UnixMicro(v[4]), nil
}

// waitNs is ⌈(us + ticks/q µs) in ns⌉ = us·1000 + ⌈ticks·1000/q⌉, the least
// whole number of nanoseconds at least the wait; it saturates below Never.
// The script's bounds keep |ticks| < 2^53, so ticks·1000 < 2^63.
func waitNs(us, ticks, q int64) time.Duration {
	x := ticks * 1000
	c := x / q
	if x%q > 0 {
		c++ // ceil; Go's division truncates, which for x < 0 is the ceiling already
	}
	if us > (math.MaxInt64-1-max(c, 0))/1000 {
		return engine.Never - 1
	}
	return time.Duration(us*1000 + c)
}
