package engine_test

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// An independent rational GCRA model (math/big TAT in ns, written from
// docs/design.md §11's rule, not from the engine's integer unit), and the
// engine checked against it on random sequences over odd shapes: T below
// 1 ns, T not whole ns, Burst 1, the largest Limit.

// ratModel is rational GCRA: TAT in ns as a big.Rat; nil means full.
type ratModel struct {
	L, W, B int64
	tat     *big.Rat
}

func (m *ratModel) T() *big.Rat { return big.NewRat(m.W, m.L) }

func (m *ratModel) tau() *big.Rat { return new(big.Rat).Mul(big.NewRat(m.B, 1), m.T()) }

func ratMax(a *big.Rat, t int64) *big.Rat {
	tr := big.NewRat(t, 1)
	if a == nil || a.Cmp(tr) < 0 {
		return tr
	}
	return new(big.Rat).Set(a)
}

func ratFloor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for positive denom
	return q.Int64()
}

func ratCeil(r *big.Rat) int64 {
	neg := new(big.Rat).Neg(r)
	return -ratFloor(neg)
}

// remaining at t given a tat: floor((tau - (max(tat,t)-t))/T), at least 0.
func (m *ratModel) remaining(tat *big.Rat, t int64) int64 {
	tt := ratMax(tat, t)
	room := new(big.Rat).Sub(m.tau(), new(big.Rat).Sub(tt, big.NewRat(t, 1)))
	if room.Sign() < 0 {
		return 0
	}
	return ratFloor(new(big.Rat).Quo(room, m.T()))
}

// decide returns (allowed, remaining, retryAfter) and records on admission.
func (m *ratModel) decide(t, n int64, record bool) (bool, int64, time.Duration) {
	if n > m.B || n < 0 {
		return false, m.remaining(m.tat, t), engine.Never
	}
	tt := ratMax(m.tat, t)
	need := new(big.Rat).Mul(big.NewRat(n, 1), m.T())
	end := new(big.Rat).Add(tt, need)
	over := new(big.Rat).Sub(new(big.Rat).Sub(end, big.NewRat(t, 1)), m.tau())
	if over.Sign() <= 0 {
		if record && n > 0 {
			m.tat = end
		}
		if record {
			return true, m.remaining(m.tat, t), 0
		}
		return true, m.remaining(end, t), 0
	}
	return false, m.remaining(m.tat, t), time.Duration(ratCeil(over))
}

// chargeModel: TAT ← max(TAT, t) + n·T when the result is at most t + 2τ.
func (m *ratModel) charge(t, n int64) bool {
	tt := ratMax(m.tat, t)
	end := new(big.Rat).Add(tt, new(big.Rat).Mul(big.NewRat(n, 1), m.T()))
	lim := new(big.Rat).Add(big.NewRat(t, 1), new(big.Rat).Mul(big.NewRat(2, 1), m.tau()))
	if end.Cmp(lim) > 0 {
		return false
	}
	if n > 0 {
		m.tat = end
	}
	return true
}

func bigRat(a, b int64) *big.Rat { return big.NewRat(a, b) }

type ratCfg struct {
	L int64
	W time.Duration
	B int64
}

func (c ratCfg) String() string { return fmt.Sprintf("L%d_W%d_B%d", c.L, int64(c.W), c.B) }

func (c ratCfg) burst() int64 {
	if c.B == 0 {
		return c.L
	}
	return c.B
}

func newRatBucket(t *testing.T, c ratCfg, clk engine.Clock) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: c.L, Window: c.W, Burst: c.B, Clock: clk, DisableEviction: true})
	if err != nil {
		t.Fatalf("New(%v): %v", c, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

var ratCfgs = []ratCfg{
	{7, time.Millisecond, 0},
	{7, time.Millisecond, 1},
	{7, time.Millisecond, 3},
	{3, 10 * time.Nanosecond, 0},
	{3, 10 * time.Nanosecond, 1},
	{3, 10 * time.Nanosecond, 5},
	{engine.MaxLimit, time.Duration(1) << 59, 1},
	{engine.MaxLimit, time.Duration(1) << 59, 2},
	{10, time.Second, 5},
	{999_999, 24 * time.Hour, 1},
	{1_000_000, 24 * time.Hour, 0},
	{1, time.Nanosecond, 1},
	{engine.MaxLimit, time.Nanosecond, 0},
}

// Guards design.md §11 "the engine decides exactly as the
// rational rule does"; Decision docs (Remaining: units still admitted now;
// RetryAfter: the least wait after which the same request fits).
func TestTokenBucketMatchesRationalModel(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range ratCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			e := newRatBucket(t, c, engine.NewManualClock(time.Unix(0, base)))
			m := &ratModel{L: c.L, W: int64(c.W), B: c.burst()}
			rng := rand.New(rand.NewSource(int64(c.L) ^ int64(c.W) ^ c.B))
			T := int64(c.W) / c.L
			tau := new(big.Rat).Mul(big.NewRat(m.B, 1), m.T())
			tauNs := ratCeil(tau)
			now := base
			for i := 0; i < 1500; i++ {
				switch rng.Intn(8) {
				case 0:
				case 1:
					now++
				case 2:
					now += T
				case 3:
					now += T + 1
				case 4:
					if T > 0 {
						now += T - 1
					}
				case 5:
					now += rng.Int63n(tauNs + 2)
				case 6:
					now += rng.Int63n(3*tauNs/2 + 2)
				case 7:
					if rng.Intn(50) == 0 {
						now += rng.Int63n(int64(200 * 365 * 24 * time.Hour / 100)) // up to 2 years
					}
				}
				n := rng.Int63n(m.B+1) + 0
				if rng.Intn(4) == 0 {
					n = 1
				}
				if n == 0 {
					n = 1
				}
				d := e.AllowAt("k", n, time.Unix(0, now))
				ok, rem, ra := m.decide(now, n, true)
				if d.Allowed != ok || d.Remaining != rem || d.RetryAfter != ra || d.Limit != m.B {
					t.Fatalf("op %d at +%d ns n=%d: engine %+v, model allowed=%v remaining=%d retryAfter=%d limit=%d",
						i, now-base, n, d, ok, rem, ra, m.B)
				}
				if !ok {
					// 1 ns earlier than RetryAfter: still refused; at RetryAfter admitted.
					if ra > 1 && ra != engine.Never {
						d1 := e.AllowAt("k", n, time.Unix(0, now+int64(ra)-1))
						if d1.Allowed {
							t.Fatalf("op %d: admitted 1 ns before RetryAfter %d (n=%d)", i, ra, n)
						}
						now += int64(ra) - 1 // keep times monotone: older times are tested apart
						m.decide(now, n, true)
					}
				}
			}
		})
	}
}

// Guards design.md §11 (the rule, Settle/Charge, Cancel of
// the newest booking, Remaining and RetryAfter) on random single-threaded
// sequences of AllowAt, peeks, ChargeAt, ReserveAt+Cancel and SettleAt.
func TestTokenBucketOpsMatchModel(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range ratCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			e := newRatBucket(t, c, engine.NewManualClock(time.Unix(0, base)))
			m := &ratModel{L: c.L, W: int64(c.W), B: c.burst()}
			rng := rand.New(rand.NewSource(7 + c.L + int64(c.W)))
			tauNs := ratCeil(m.tau())
			now := base
			check := func(i int, what string, d engine.Decision, ok bool, rem int64, ra time.Duration) {
				t.Helper()
				if d.Allowed != ok || d.Remaining != rem || d.RetryAfter != ra {
					t.Fatalf("op %d %s at +%d: engine %+v, model %v %d %d", i, what, now-base, d, ok, rem, ra)
				}
			}
			for i := 0; i < 1500; i++ {
				now += rng.Int63n(tauNs/2 + 2)
				at := time.Unix(0, now)
				n := rng.Int63n(m.B) + 1
				switch rng.Intn(5) {
				case 0, 1:
					d := e.AllowAt("k", n, at)
					ok, rem, ra := m.decide(now, n, true)
					check(i, "allow", d, ok, rem, ra)
				case 2:
					d := e.AllowAt("k", 0, at)
					// n = 0 is allowed, records nothing, and reports Remaining.
					check(i, "peek", d, true, m.remaining(m.tat, now), 0)
				case 3:
					cn := min(rng.Int63n(2*m.B+2), engine.MaxLimit) // n above MaxLimit is a documented error
					d, err := e.ChargeAt("k", cn, at)
					if ok := m.charge(now, cn); ok != (err == nil) {
						t.Fatalf("op %d charge %d at +%d: err %v, model fits %v", i, cn, now-base, err, ok)
					} else if !ok && !errors.Is(err, engine.ErrDebtFull) {
						t.Fatalf("op %d charge: %v", i, err)
					}
					// The Decision a one-unit request would get, with Remaining
					// the units left now (as every algorithm's ChargeAt reports).
					ok, _, ra := m.decide(now, 1, false)
					if err == nil {
						check(i, "charge", d, ok, m.remaining(m.tat, now), ra)
					}
				case 4:
					r := e.ReserveAt("k", n, at)
					before := m.tat
					ok, rem, ra := m.decide(now, n, true)
					check(i, "reserve", r.Decision(), ok, rem, ra)
					if ok {
						switch rng.Intn(3) {
						case 0:
							if !r.Cancel() {
								t.Fatalf("op %d: cancel of the newest booking failed", i)
							}
							// back to max(TAT before, t).
							m.tat = ratMax(before, now)
						case 1:
							actual := min(rng.Int63n(2*m.B), engine.MaxLimit)
							if _, err := r.SettleAt(actual, at); err == nil {
								m.tat = ratMax(before, now)
								if !m.charge(now, actual) {
									t.Fatalf("op %d: settle to %d accepted beyond the debt bound", i, actual)
								}
							} else if !errors.Is(err, engine.ErrDebtFull) {
								t.Fatalf("op %d settle: %v", i, err)
							} else {
								// nothing recorded beyond the reservation
							}
						}
					}
				}
			}
		})
	}
}
