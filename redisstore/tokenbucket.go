package redisstore

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// errTokenBucketHybrid is New's error for a TokenBucket with WithHybrid.
var errTokenBucketHybrid = errors.New("redisstore: Config.Algorithm = TokenBucket cannot be combined with WithHybrid: a replica's local allowance is a share of a window's count, and a bucket has no window to share; use a plain limiter (one script call per decision, exact across replicas)")

// initTokenBucket sets up a TokenBucket Limiter (New): the rate of
// Config.Limit and Burst, refused with an error naming the field when the
// script cannot be exact for it (see newTBRate).
func (l *Limiter) initTokenBucket() error {
	if l.cfg.KeyLimit != nil && l.opts.policy == FallbackLocal {
		return errors.New("redisstore: WithFallbackLocal with a TokenBucket and Config.KeyLimit: the fallback is the engine's token bucket, which has no per-key limits (its state's unit is fixed by Limit); use FailClosed or FailOpen, or one limiter per rate")
	}
	b, err := newTokenBucket(l.cfg.Limit, l.cfg.Burst, l.cfg.Window)
	if err != nil {
		return err
	}
	l.tb = b
	l.maxLimit = engine.MaxLimit
	// The failure policies' RetryAfter (FailClosed, and FallbackLocal's
	// cost above its share) is one emission interval, Window/Limit
	// rounded up to the ns.
	l.width = max(1, (int64(l.cfg.Window)+l.cfg.Limit-1)/l.cfg.Limit)
	l.geo = ":tb"
	// The breaker's probe (probeCall) runs the windows' script on the
	// key's probe name: a fixed window of 1 s, kept 2 s.
	l.args = []any{int64(1_000_000), 0, "0", int64(2000)}
	return nil
}

// capOf is the Decision's Limit for a key whose limit is limit: the
// bucket's capacity for a TokenBucket, the limit itself for the windows.
func (l *Limiter) capOf(limit int64) int64 {
	if l.tb != nil {
		return l.tb.capacity(limit)
	}
	return limit
}

// script is the decision script: the token bucket's or the windows'.
func (l *Limiter) script() *redis.Script {
	if l.tb != nil {
		return tbScript
	}
	return script
}

// parse reads a decision script's reply for a key whose limit is limit.
func (l *Limiter) parse(res any, limit int64) (engine.Decision, time.Time, error) {
	if l.tb != nil {
		return l.tb.parse(res, limit)
	}
	return parse(res, limit)
}

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
		return tbRate{}, fmt.Errorf("redisstore: TokenBucket with Config.Window = %v and Config.Limit = %d: Window/Limit is p/q = %d/%d µs in lowest terms, and the script needs 2p + 2q ≤ 2^53 to be exact in Lua's doubles; want a Window/Limit that reduces further (a Window of whole µs, for one)", window, limit, r.p, r.q)
	}
	maxBurst := (MaxExact - 2*r.q - r.p) / r.p
	if burst > maxBurst {
		return tbRate{}, fmt.Errorf("redisstore: TokenBucket: a bucket of %d units (Config.Burst, or Limit when Burst is 0) with Window/Limit = p/q = %d/%d µs in lowest terms: the script needs Burst·p + p + 2q ≤ 2^53 to be exact in Lua's doubles; want Burst ≤ %d, or a Window/Limit that reduces further", burst, r.p, r.q, maxBurst)
	}
	r.depth = burst * r.p
	if r.depth/r.q >= maxFill {
		// depth < 2^53 here, so q ≤ 8 and maxFill·q fits.
		return tbRate{}, fmt.Errorf("redisstore: TokenBucket: a bucket of %d units (Config.Burst, or Limit when Burst is 0) at Limit %d per Window %v takes %v (Burst·Window/Limit) to fill, want under 2^50 µs (about 35.7 years): Burst ≤ %d", burst, limit, window, time.Duration(min(r.depth/r.q, math.MaxInt64/1000)*1000), (maxFill*r.q-1)/r.p)
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

// exact reports whether a key whose limit is limit (from KeyLimit) has
// an exact rate (see newTBRate); a key whose limit has none is refused
// with RetryAfter Never, as a KeyLimit answer out of range is.
func (b *tokenBucket) exact(limit int64) bool {
	_, ok := b.rate(limit)
	return ok
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

// args is the script's ARGV for n units of a key whose limit is limit
// (exact: limitOf refused it otherwise).
func (b *tokenBucket) args(n, limit int64) []any {
	r, _ := b.rate(limit)
	return r.args(n)
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
