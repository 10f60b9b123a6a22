package engine_test

import (
	"errors"
	"math/big"
	"math/rand"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// chargeModel: TAT ← max(TAT, t) + n·T when the result is at most t + 2τ.
func (m *advModel) charge(t, n int64) bool {
	tt := advMax(m.tat, t)
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

// Contradicts, if it fails: design.md §11 (the rule, Settle/Charge, Cancel of
// the newest booking, Remaining and RetryAfter) on random single-threaded
// sequences of AllowAt, peeks, ChargeAt, ReserveAt+Cancel and SettleAt.
func TestAdvTokenBucketOpsMatchModel(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range advCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			e := newAdv(t, c, engine.NewManualClock(time.Unix(0, base)))
			m := &advModel{L: c.L, W: int64(c.W), B: c.burst()}
			rng := rand.New(rand.NewSource(7 + c.L + int64(c.W)))
			tauNs := advCeil(m.tau())
			now := base
			check := func(i int, what string, d engine.Decision, ok bool, rem int64, ra time.Duration) {
				t.Helper()
				if d.Allowed != ok || d.Remaining != rem || d.RetryAfter != ra {
					t.Fatalf("op %d %s at +%d: engine %+v, model %v %d %d", i, what, now-base, d, ok, rem, ra)
				}
			}
			for i := 0; i < 3000; i++ {
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
							m.tat = advMax(before, now)
						case 1:
							actual := min(rng.Int63n(2*m.B), engine.MaxLimit)
							if _, err := r.SettleAt(actual, at); err == nil {
								m.tat = advMax(before, now)
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
