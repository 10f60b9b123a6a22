package ringslot

import (
	"math"
	"math/bits"
)

// The token bucket (docs/design.md §11) is decided by GCRA: a key's whole
// state is its theoretical arrival time (TAT), the instant at which its
// bucket would be full again, and n units fit at t iff
// max(TAT, t) + n·T − t ≤ Burst·T, with T = Window/Limit the emission
// interval. An admission moves TAT to max(TAT, t) + n·T with one CAS.
//
// T is rarely a whole number of nanoseconds, so time is measured in units
// of 1/L' ns, with L' = Limit/g, W' = Window/g and g = gcd(Limit, Window):
// then T is exactly W' units, every time t is t·L' units, and nothing is
// rounded. A 64-bit word cannot hold an absolute time in such units, so it
// holds the TAT as an offset from the ring's base, a Unix ns fixed when
// the ring is created:
//
//	[bucketTAT]   u ≥ 0: TAT = base + u/L' ns; or u with the sign bit set
//	              once the ring is retired (retiredWord keeps u intact)
//	[bucketBase]  base, Unix ns, written before the ring is published
//	then the key (state.go)
//
// Invariants, on which the lock-free argument rests:
//   - base never changes; u changes only by a CAS from the exact word read,
//     so every decision is made on the TAT as it was at its CAS.
//   - u ≤ span·L' + ahead ≤ 2^62 (spanUnits + aheadUnits): a writer decides
//     only at x = t − base ≤ span, and never writes u more than ahead past
//     x·L' (admissions τ, charges 2τ, Wait's bookings ahead). A writer at
//     x > span moves the key into a new ring instead (Carry), whose base is
//     at least base + min(span, ⌊u/L'⌋): the TAT is carried exactly.
//   - A retired ring's word never changes again; retirement is either a
//     sweep of a full bucket (TAT ≤ the sweeper's now) or a move, and in
//     both cases the key's next ring carries the TAT (Carry) or starts at or
//     after it (RetiredAt: the table's floor).
const (
	bucketTAT   = 0
	bucketBase  = 1
	bucketWords = 2

	// spanUnits bounds x·L', the time since base in units, at which a
	// writer still decides on the ring: 2^61.
	spanUnits = 1 << 61
	// aheadUnits is how far u may lead x·L' (a booking's reach): 2^61,
	// so that u ≤ 2^62 and u + n·W' (n·W' ≤ τ ≤ 2^60) stays below 2^63.
	aheadUnits = 1 << 61
	// MaxBucketSpan bounds τ = Burst·W', the bucket's capacity in units,
	// so that a debt of one more Burst (2τ) fits within aheadUnits.
	MaxBucketSpan = 1 << 60
)

// bucket is the shape of an engine's token-bucket rings.
type bucket struct {
	rate   int64   // L': units per ns
	step   int64   // W': units per bucket unit (T)
	burst  int64   // B
	tau    int64   // τ = B·W' ≤ MaxBucketSpan
	span   int64   // ⌊spanUnits/L'⌋ ns: how far past base a writer decides on a ring
	byRate divider // ÷ L'
	byStep divider // ÷ W'
}

// BucketUnits returns L' and W' for limit per window (both ≥ 1): the limit
// and window divided by their gcd, and the capacity τ = burst·W', with ok
// false when τ is above MaxBucketSpan.
func BucketUnits(limit, window, burst int64) (rate, step, tau int64, ok bool) {
	a, b := limit, window
	for b != 0 {
		a, b = b, a%b
	}
	rate, step = limit/a, window/a
	hi, lo := bits.Mul64(uint64(burst), uint64(step))
	if hi != 0 || lo > MaxBucketSpan {
		return rate, step, 0, false
	}
	return rate, step, int64(lo), true
}

// NewBucket describes token-bucket rings of burst units refilling at limit
// per window ns. Preconditions (checked by the engine): 1 ≤ limit, burst ≤
// 2^40 − 1, 1 ≤ window, and BucketUnits ok. Width returns window and Span 0.
func NewBucket(limit, window, burst int64) *Geometry {
	rate, step, tau, _ := BucketUnits(limit, window, burst)
	return &Geometry{
		width:   window,
		slots:   1,
		special: true,
		words:   bucketWords,
		keyOff:  bucketWords * 8,
		byWidth: newDivider(window),
		bySlots: newDivider(1),
		bk: bucket{
			rate: rate, step: step, burst: burst, tau: tau,
			span:   spanUnits / rate,
			byRate: newDivider(rate), byStep: newDivider(step),
		},
	}
}

// IsBucket reports whether g describes token-bucket rings.
func (g *Geometry) IsBucket() bool { return g.special && !g.log }

// newBucket allocates a bucket ring for key whose base is base and whose
// TAT is u units after it.
func newBucket(base, u int64, key string) Ring {
	w := alloc(bucketWords, key)
	w[bucketTAT].Store(u)
	w[bucketBase].Store(base)
	return Ring{p: &w[0]}
}

// at returns where a decision at t (Unix ns, ≥ 0) stands on r: x = t −
// base in ns, clamped to 0 when t is older than base (time never runs
// backwards for a key: an older t is decided at base), and the effective
// time base + x.
func (b *bucket) at(base, t int64) (x, eff int64) {
	if t < base {
		return 0, base
	}
	return t - base, t
}

// ceilUnits returns ⌈u/L'⌉ for u ≥ 0.
func (b *bucket) ceilUnits(u int64) int64 {
	q, rem := b.byRate.divmod(u)
	if rem != 0 {
		q++
	}
	return q
}

// bucketAcquire is Acquire on a bucket ring; limit is the burst.
func (g *Geometry) bucketAcquire(r Ring, t, n int64, detail bool) Result {
	b := &g.bk
	x, eff := b.at(r.word(bucketBase).Load(), t)
	tat := r.word(bucketTAT)
	need := n * b.step // n ≤ B: at most τ
	for {
		u := tat.Load()
		if u < 0 {
			return Result{Verdict: Verdict{Dead: true}}
		}
		if x > b.span {
			// Too far past base for x·L' to be safe: retire the ring,
			// keeping u, so that the key moves into a ring based at t
			// (Carry) with its TAT exact.
			if tat.CompareAndSwap(u, u|math.MinInt64) {
				return Result{Verdict: Verdict{Dead: true}}
			}
			continue
		}
		now := x * b.rate // ≤ spanUnits
		start := max(u, now)
		if start-now > b.tau-need {
			if !detail {
				return Result{}
			}
			return b.deny(t, x, eff, start, now, need)
		}
		next := start + need // ≤ now + τ: the invariant's bound
		if tat.CompareAndSwap(u, next) {
			if !detail {
				return Result{Verdict: Verdict{Allowed: true}}
			}
			rem, _ := b.byStep.divmod(b.tau - (next - now))
			return Result{Verdict: Verdict{Allowed: true}, Remaining: rem, Epoch: next}
		}
	}
}

// remaining is the whole units that fit at now given start = max(u, now).
func (b *bucket) remaining(start, now int64) int64 {
	ahead := start - now
	if ahead >= b.tau {
		return 0
	}
	q, _ := b.byStep.divmod(b.tau - ahead)
	return q
}

// deny builds the refusal of need units (≤ τ) at t, decided at x ns past
// base (effective time eff) on start = max(u, now): the least wait after
// which start + need − τ ≤ (x+d)·L', that is d = ⌈(start+need−τ)/L'⌉ − x,
// counted from the caller's t.
func (b *bucket) deny(t, x, eff, start, now, need int64) Result {
	d := b.ceilUnits(start+need-b.tau) - x // start+need−τ > now ≥ 0, so d ≥ 1
	return Result{Remaining: b.remaining(start, now), RetryAfter: fromCaller(d, eff, t), Epoch: start}
}

// bucketPeek is Peek on a bucket ring: what n units would get at t.
func (g *Geometry) bucketPeek(r Ring, t, n int64) Result {
	b := &g.bk
	x, eff := b.at(r.word(bucketBase).Load(), t)
	u := r.word(bucketTAT).Load()
	if u < 0 {
		return Result{Verdict: Verdict{Dead: true}}
	}
	if x > b.span && x >= b.ceilUnits(u) {
		// Full: TAT ≤ t, and x·L' might not fit. Nothing of the ring
		// counts.
		return Result{Verdict: Verdict{Allowed: n >= 0 && n <= b.burst}, Remaining: b.burst, RetryAfter: neverIf(n < 0 || n > b.burst), Epoch: u}
	}
	now := x * b.rate // x ≤ span, or x·L' < u ≤ 2^62
	start := max(u, now)
	res := Result{Remaining: b.remaining(start, now), Epoch: start}
	switch {
	case n < 0 || n > b.burst:
		res.RetryAfter = Never
	case start-now <= b.tau-n*b.step:
		res.Allowed = true
	default:
		return b.deny(t, x, eff, start, now, n*b.step)
	}
	return res
}

func neverIf(c bool) int64 {
	if c {
		return Never
	}
	return 0
}

// Book is Acquire that may admit n units in the future, as a Wait of
// golang.org/x/time/rate books its place: the units are taken now, at
// max(TAT, t), and the caller may use them once the bucket would have
// admitted them, RetryAfter after t (0: at once). It books only when that
// wait is at most maxWait ns, and TAT stays within the invariant's reach
// (aheadUnits); otherwise it records nothing and returns a denial whose
// RetryAfter is the wait the booking would have needed (Never beyond the
// reach). Preconditions: a bucket geometry, 1 ≤ n ≤ burst, t ≥ 0. Epoch is
// the booking's TAT, for Cancel.
func (g *Geometry) Book(r Ring, t, n, maxWait int64) Result {
	b := &g.bk
	x, eff := b.at(r.word(bucketBase).Load(), t)
	tat := r.word(bucketTAT)
	need := n * b.step
	for {
		u := tat.Load()
		if u < 0 {
			return Result{Verdict: Verdict{Dead: true}}
		}
		if x > b.span {
			if tat.CompareAndSwap(u, u|math.MinInt64) {
				return Result{Verdict: Verdict{Dead: true}}
			}
			continue
		}
		now := x * b.rate
		start := max(u, now)
		wait := int64(0) // an older t is decided at base, as Acquire does: no wait to get there
		if start-now > b.tau-need {
			wait = fromCaller(b.ceilUnits(start+need-b.tau)-x, eff, t)
		}
		if start-now > aheadUnits-need {
			return Result{Remaining: 0, RetryAfter: Never, Epoch: start}
		}
		if wait > maxWait {
			return Result{RetryAfter: wait, Epoch: start}
		}
		next := start + need // ≤ now + aheadUnits
		if tat.CompareAndSwap(u, next) {
			// Remaining as of the instant the units are admitted: now, or
			// the first whole ns at which start + need − τ is reached.
			adm := now
			if wait > 0 {
				adm = b.ceilUnits(start+need-b.tau) * b.rate // ≤ next: no wrap
			}
			return Result{Verdict: Verdict{Allowed: true}, Remaining: b.remaining(next, adm), RetryAfter: wait, Epoch: next}
		}
	}
}

// bucketCancel gives n units back to r if its TAT is still at, the TAT
// right after they were booked: only the newest booking can be given back,
// because a later admission was decided on a TAT that included these
// units, and removing them from under it could admit more than the bucket
// holds. docs/design.md §11.
func (g *Geometry) bucketCancel(r Ring, at, n int64) (returned, dead bool) {
	tat := r.word(bucketTAT)
	u := tat.Load()
	if u < 0 {
		return false, true
	}
	// at ≥ n·W' for a booking of n made on r; a smaller at is not one.
	if u != at || n < 1 || n > g.bk.burst || at < n*g.bk.step {
		return false, false
	}
	if tat.CompareAndSwap(at, at-n*g.bk.step) {
		return true, false
	}
	return false, tat.Load() < 0
}

// bucketCharge is Charge on a bucket ring: n units taken at t whatever the
// bucket holds, a debt of at most one more Burst (TAT at most 2τ past t);
// beyond that nothing is recorded and the Charged is Full.
func (g *Geometry) bucketCharge(r Ring, t, n int64) Charged {
	b := &g.bk
	x, _ := b.at(r.word(bucketBase).Load(), t)
	tat := r.word(bucketTAT)
	for {
		u := tat.Load()
		if u < 0 {
			return Charged{Dead: true}
		}
		if x > b.span {
			if tat.CompareAndSwap(u, u|math.MinInt64) {
				return Charged{Dead: true}
			}
			continue
		}
		now := x * b.rate
		start := max(u, now)
		// n·W' ≤ 2τ − (start − now), compared without the product.
		room := 2*b.tau - (start - now)
		if room < 0 || n > room/b.step {
			return Charged{Full: true}
		}
		next := start + n*b.step
		if tat.CompareAndSwap(u, next) {
			return Charged{Epoch: next}
		}
	}
}

// bucketRetire is Retire on a bucket ring: a bucket that is full at now
// (TAT ≤ now) holds nothing a fresh key would not, so it is retired,
// keeping u; a retired ring reports whether it was full by now.
func (g *Geometry) bucketRetire(r Ring, now int64) bool {
	tat := r.word(bucketTAT)
	for {
		u := tat.Load()
		if u < 0 {
			return g.RetiredAt(r) <= now
		}
		if g.bucketFullAt(r, u) > now {
			return false
		}
		if tat.CompareAndSwap(u, u|math.MinInt64) {
			return true
		}
	}
}

// bucketFullAt returns the first Unix ns at which a TAT of u on r is
// reached: base + ⌈u/L'⌉, saturated at MaxInt64.
func (g *Geometry) bucketFullAt(r Ring, u int64) int64 {
	base := r.word(bucketBase).Load()
	c := g.bk.ceilUnits(u)
	if c > math.MaxInt64-base {
		return math.MaxInt64
	}
	return base + c
}

// Carry returns the key's next ring after old, a retired bucket ring, for
// a writer at t: the TAT is carried exactly to a ring based at
// max(t, min(base + span, ⌊TAT⌋)), which is at least old's base, and at
// most the time of the writer that moved it (x > span) or ⌊TAT⌋; so the
// new u = (TAT − base')·L' is at most old's u, and the invariant holds
// (docs/design.md §11). The caller holds the key's bucket lock (the table's
// Swap), so no other ring is made for the key meanwhile.
func (g *Geometry) Carry(old Ring, t int64) Ring {
	b := &g.bk
	u := old.word(bucketTAT).Load() & math.MaxInt64
	base := old.word(bucketBase).Load()
	whole, _ := b.byRate.divmod(u)
	nb := base + min(b.span, whole) // ≤ base + span, or ≤ ⌊TAT⌋: no wrap before 2262 (t and base are)
	if nb < base {                  // wrapped past int64: the times are near 2262
		nb = math.MaxInt64
	}
	nb = max(nb, t)
	d := nb - base
	nu := int64(0)
	if d < b.ceilUnits(u) { // TAT > nb: carry the rest; d·L' < u + L'
		nu = u - d*b.rate
	}
	return newBucket(nb, nu, g.Key(old))
}

// BookedAt returns the Unix ns, rounded down, from which n units booked
// on r with a TAT of at after them were taken: max(TAT, t) before them.
func (g *Geometry) BookedAt(r Ring, at, n int64) int64 {
	q, _ := g.bk.byRate.divmod(at - n*g.bk.step)
	return r.word(bucketBase).Load() + q
}
