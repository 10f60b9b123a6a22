package engine_test

import (
	"math"
	"math/big"
)

// gcraModel is the token bucket's reference: GCRA in exact rationals
// (big.Rat), sharing no code or units with the engine. T = Window/Limit ns,
// capacity τ = Burst·T. A key's state is its theoretical arrival time TAT
// and its base, the time its state was created: a request older than the
// base is decided at the base (an older now gains nothing). n units fit at
// t iff max(TAT, t) + n·T − t ≤ τ; they move TAT to max(TAT, t) + n·T.
//
// The base moves as docs/design.md §11 states: a request that records (an
// admission, a booking or a charge) more than span = ⌊2^61/L'⌋ ns after
// the base (L' = Limit/gcd(Limit, Window)) moves it to
// max(t, min(base + span, ⌊TAT⌋)); bookings made before a move can no
// longer be cancelled.
type gcraModel struct {
	t, tau *big.Rat
	burst  int64
	span   int64
	keys   map[string]*gcraKey
}

type gcraKey struct {
	tat  *big.Rat
	base int64
	gen  int // moves of the base
	// newest: the TAT right after the newest booking (a copy); a Cancel
	// gives back only while the TAT is still that, and the base has not
	// moved since.
	newest *big.Rat
}

func newGCRAModel(limit, window, burst int64) *gcraModel {
	if burst == 0 {
		burst = limit
	}
	t := big.NewRat(window, limit)
	g := new(big.Int).GCD(nil, nil, big.NewInt(limit), big.NewInt(window)).Int64()
	return &gcraModel{t: t, tau: new(big.Rat).Mul(t, big.NewRat(burst, 1)), burst: burst, span: (1 << 61) / (limit / g), keys: map[string]*gcraKey{}}
}

func rat(x int64) *big.Rat { return big.NewRat(x, 1) }

// key returns key's state for a request at t; record creates it (full at
// t) and moves its base when t is past the span.
func (m *gcraModel) key(key string, t int64, record bool) *gcraKey {
	k := m.keys[key]
	if k == nil {
		k = &gcraKey{tat: rat(t), base: t}
		if record {
			m.keys[key] = k
		}
		return k
	}
	if record && t-k.base > m.span {
		whole := new(big.Int).Quo(k.tat.Num(), k.tat.Denom()).Int64() // TAT > 0
		k.base = max(t, min(k.base+m.span, whole))
		k.gen++
		k.newest = nil
	}
	return k
}

// eff is the time a request at t is decided at.
func (k *gcraKey) eff(t int64) int64 { return max(t, k.base) }

// gcraOutcome is a decision as the engine reports it.
type gcraOutcome struct {
	allowed    bool
	remaining  int64
	retryAfter int64 // ns, from the caller's t; math.MaxInt64 for Never
}

// state returns max(TAT, e) − e, how far the bucket is behind at e.
func (k *gcraKey) behind(e int64) *big.Rat {
	s := new(big.Rat).Set(k.tat)
	if s.Cmp(rat(e)) < 0 {
		s = rat(e)
	}
	return s.Sub(s, rat(e))
}

// remaining is ⌊(τ − behind)/T⌋, or 0.
func (m *gcraModel) remaining(behind *big.Rat) int64 {
	r := new(big.Rat).Sub(m.tau, behind)
	if r.Sign() <= 0 {
		return 0
	}
	r.Quo(r, m.t)
	q := new(big.Int).Quo(r.Num(), r.Denom())
	return q.Int64()
}

// decide is AllowAt(key, n, t) for 1 ≤ n, n may exceed the burst.
func (m *gcraModel) decide(key string, n, t int64, record bool) gcraOutcome {
	k := m.key(key, t, record && n >= 1 && n <= m.burst)
	e := k.eff(t)
	b := k.behind(e)
	if n > m.burst {
		return gcraOutcome{remaining: m.remaining(b), retryAfter: math.MaxInt64}
	}
	need := new(big.Rat).Mul(m.t, rat(n))
	after := new(big.Rat).Add(b, need)
	if after.Cmp(m.tau) <= 0 {
		if record {
			k.tat = new(big.Rat).Add(rat(e), after)
			k.newest = new(big.Rat).Set(k.tat)
		}
		return gcraOutcome{allowed: true, remaining: m.remaining(after)}
	}
	// The least whole d with TAT + n·T − τ ≤ e + d: d = ⌈TAT + n·T − τ − e⌉.
	x := new(big.Rat).Add(k.tat, need)
	x.Sub(x, m.tau)
	x.Sub(x, rat(e))
	d := ceilRat(x)
	return gcraOutcome{remaining: m.remaining(b), retryAfter: e + d - t}
}

// charge is ChargeAt: n units taken whatever the bucket holds, up to a
// debt of one Burst (behind ≤ 2τ); false when it would pass that.
func (m *gcraModel) charge(key string, n, t int64) bool {
	k := m.key(key, t, true)
	e := k.eff(t)
	after := new(big.Rat).Add(k.behind(e), new(big.Rat).Mul(m.t, rat(n)))
	if after.Cmp(new(big.Rat).Mul(m.tau, rat(2))) > 0 {
		return false
	}
	k.tat = after.Add(after, rat(e))
	k.newest = new(big.Rat).Set(k.tat)
	return true
}

// cancel gives back n units of the booking that left TAT at at, if it is
// still the newest state.
func (m *gcraModel) cancel(key string, at *big.Rat, gen int, n int64) bool {
	k := m.keys[key]
	if k == nil || at == nil || k.gen != gen || k.tat.Cmp(at) != 0 {
		return false
	}
	k.tat = new(big.Rat).Sub(k.tat, new(big.Rat).Mul(m.t, rat(n)))
	return true
}

func ceilRat(x *big.Rat) int64 {
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}
