package engine_test

// Adversarial review of the token bucket (issue 28), written against the
// public API and the docs only (docs/design.md §11, engine's doc comments).
// The model below is an independent rational GCRA (math/big), not the
// engine's integer unit.

import (
	"fmt"
	"math"
	"math/big"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// advModel is rational GCRA: TAT in ns as a big.Rat; nil means full.
type advModel struct {
	L, W, B int64
	tat     *big.Rat
}

func (m *advModel) T() *big.Rat   { return big.NewRat(m.W, m.L) }
func (m *advModel) tau() *big.Rat { return new(big.Rat).Mul(big.NewRat(m.B, 1), m.T()) }

func advMax(a *big.Rat, t int64) *big.Rat {
	tr := big.NewRat(t, 1)
	if a == nil || a.Cmp(tr) < 0 {
		return tr
	}
	return new(big.Rat).Set(a)
}

func advFloor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for positive denom
	return q.Int64()
}

func advCeil(r *big.Rat) int64 {
	neg := new(big.Rat).Neg(r)
	return -advFloor(neg)
}

// remaining at t given a tat: floor((tau - (max(tat,t)-t))/T), at least 0.
func (m *advModel) remaining(tat *big.Rat, t int64) int64 {
	tt := advMax(tat, t)
	room := new(big.Rat).Sub(m.tau(), new(big.Rat).Sub(tt, big.NewRat(t, 1)))
	if room.Sign() < 0 {
		return 0
	}
	return advFloor(new(big.Rat).Quo(room, m.T()))
}

// decide returns (allowed, remaining, retryAfter) and records on admission.
func (m *advModel) decide(t, n int64, record bool) (bool, int64, time.Duration) {
	if n > m.B || n < 0 {
		return false, m.remaining(m.tat, t), engine.Never
	}
	tt := advMax(m.tat, t)
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
	return false, m.remaining(m.tat, t), time.Duration(advCeil(over))
}

type advCfg struct {
	L int64
	W time.Duration
	B int64
}

func (c advCfg) String() string { return fmt.Sprintf("L%d_W%d_B%d", c.L, int64(c.W), c.B) }

func (c advCfg) burst() int64 {
	if c.B == 0 {
		return c.L
	}
	return c.B
}

func newAdv(t *testing.T, c advCfg, clk engine.Clock) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: c.L, Window: c.W, Burst: c.B, Clock: clk, DisableEviction: true})
	if err != nil {
		t.Fatalf("New(%v): %v", c, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

var advCfgs = []advCfg{
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

// Contradicts, if it fails: design.md §11 "the engine decides exactly as the
// rational rule does"; Decision docs (Remaining: units still admitted now;
// RetryAfter: the least wait after which the same request fits).
func TestAdvTokenBucketMatchesRationalModel(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range advCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			e := newAdv(t, c, engine.NewManualClock(time.Unix(0, base)))
			m := &advModel{L: c.L, W: int64(c.W), B: c.burst()}
			rng := rand.New(rand.NewSource(int64(c.L) ^ int64(c.W) ^ c.B))
			T := int64(c.W) / c.L
			tau := new(big.Rat).Mul(big.NewRat(m.B, 1), m.T())
			tauNs := advCeil(tau)
			now := base
			for i := 0; i < 4000; i++ {
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

// Contradicts, if it fails: "Capacity is B, not B + 1" and the Done-when
// "a frozen clock admits exactly Burst", under racing goroutines.
func TestAdvTokenBucketFrozenClockExactlyBurst(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range advCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			b := c.burst()
			if b > 5000 {
				b = -1
			}
			e := newAdv(t, c, engine.NewManualClock(at))
			var got atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 800; i++ {
						if e.AllowAt("k", 1, at).Allowed {
							got.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			want := c.burst()
			if want > 6400 {
				want = 6400
			}
			if got.Load() != want {
				t.Fatalf("frozen clock admitted %d, want %d", got.Load(), want)
			}
		})
	}
}

// Contradicts, if it fails: "n above Burst is refused with Never, and nothing
// in the arithmetic overflows for n near MaxInt64".
func TestAdvTokenBucketHugeN(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range advCfgs {
		e := newAdv(t, c, engine.NewManualClock(at))
		for _, n := range []int64{c.burst() + 1, math.MaxInt64, math.MaxInt64 - 1, engine.MaxLimit + 1, 1 << 62} {
			d := e.AllowAt("k", n, at)
			if d.Allowed || d.RetryAfter != engine.Never {
				t.Errorf("%v n=%d: %+v, want refused with Never", c, n, d)
			}
			if _, err := e.ChargeAt("charge", n, at); err == nil && n > engine.MaxLimit {
				t.Errorf("%v ChargeAt n=%d: nil error", c, n)
			}
		}
		// The bucket is still full.
		if d := e.AllowAt("k", c.burst(), at); !d.Allowed {
			t.Errorf("%v: a refused huge n cost units: %+v", c, d)
		}
	}
}

// Contradicts, if it fails: design.md §11 "the k-th unit after the burst is
// admitted at the least whole ns ≥ its rational instant, never earlier", and
// §"Moves": "Exact: TAT is the same instant in the new ring".
func TestAdvTokenBucketKthUnitNeverEarly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range advCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			b := c.burst()
			if b < 2 {
				t.Skip("Burst 1: TestTokenBucketPacingAtRetryAfter")
			}
			e := newAdv(t, c, engine.NewManualClock(time.Unix(0, t0)))
			if d := e.AllowAt("k", b, time.Unix(0, t0)); !d.Allowed {
				t.Fatalf("burst refused: %+v", d)
			}
			for k := int64(1); k <= 4000; k++ {
				// ⌈t0 + k·W/L⌉ as a rational.
				at := t0 + advCeil(new(big.Rat).Mul(big.NewRat(k, 1), big.NewRat(int64(c.W), c.L)))
				if d := e.AllowAt("k", 1, time.Unix(0, at-1)); d.Allowed {
					t.Fatalf("unit %d admitted at %d ns, 1 ns before its instant +%d ns", k, at-1-t0, at-t0)
				}
				if d := e.AllowAt("k", 1, time.Unix(0, at)); !d.Allowed {
					t.Fatalf("unit %d refused at its instant +%d ns: %+v", k, at-t0, d)
				}
			}
		})
	}
}

// Contradicts, if it fails: design.md §11 "Time never runs backwards for a
// key: ... an older t gains nothing": a decision at an older now is never
// more generous than one at the key's newest time.
func TestAdvTokenBucketOlderTimesGainNothing(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range advCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			e := newAdv(t, c, engine.NewManualClock(time.Unix(0, base)))
			m := &advModel{L: c.L, W: int64(c.W), B: c.burst()}
			rng := rand.New(rand.NewSource(42 + c.L))
			tauNs := advCeil(m.tau())
			newest := base
			for i := 0; i < 3000; i++ {
				n := rng.Int63n(m.B) + 1
				var at int64
				if rng.Intn(3) == 0 {
					at = newest - rng.Int63n(tauNs+1) // older
					if at < base {
						at = base
					}
				} else {
					newest += rng.Int63n(tauNs/2 + 2)
					at = newest
				}
				// The most generous a correct engine may be: deciding at newest.
				okNewest, _, _ := m.decide(newest, n, false)
				d := e.AllowAt("k", n, time.Unix(0, at))
				if d.Allowed && !okNewest {
					t.Fatalf("op %d: n=%d admitted at +%d (newest +%d) where even the newest time refuses", i, n, at-base, newest-base)
				}
				if d.Allowed {
					// Record at at when the model fits it there, else not at
					// all: the model's TAT stays at most the engine's, so the
					// check above stays sound (never stricter than the engine's
					// own state allows).
					m.decide(at, n, true)
				}
			}
		})
	}
}
