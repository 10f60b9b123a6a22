package engine_test

import (
	"math"
	"math/big"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// The token bucket's time: the k-th unit never early, older and far
// times, and exactness across the key's moves to a new base.

// Guards design.md §11 "the k-th unit after the burst is
// admitted at the least whole ns ≥ its rational instant, never earlier", and
// §"Moves": "Exact: TAT is the same instant in the new ring".
func TestTokenBucketKthUnitNeverEarly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range ratCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			b := c.burst()
			if b < 2 {
				t.Skip("Burst 1: TestTokenBucketPacingAtRetryAfter")
			}
			e := newRatBucket(t, c, engine.NewManualClock(time.Unix(0, t0)))
			if d := e.AllowAt("k", b, time.Unix(0, t0)); !d.Allowed {
				t.Fatalf("burst refused: %+v", d)
			}
			for k := int64(1); k <= 4000; k++ {
				// ⌈t0 + k·W/L⌉ as a rational.
				at := t0 + ratCeil(new(big.Rat).Mul(big.NewRat(k, 1), big.NewRat(int64(c.W), c.L)))
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

// Guards design.md §11 "Time never runs backwards for a
// key: ... an older t gains nothing": a decision at an older now is never
// more generous than one at the key's newest time.
func TestTokenBucketOlderTimesGainNothing(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range ratCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			e := newRatBucket(t, c, engine.NewManualClock(time.Unix(0, base)))
			m := &ratModel{L: c.L, W: int64(c.W), B: c.burst()}
			rng := rand.New(rand.NewSource(42 + c.L))
			tauNs := ratCeil(m.tau())
			newest := base
			for i := 0; i < 1000; i++ {
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

// Guards AllowAt doc ("A now before 1970 or after
// 2262-04-11 is refused with RetryAfter Never and leaves the key untouched"),
// Decision.RetryAfter ("Never ... also when the wait would end past
// 2262-04-11"), and design.md §11 Moves (exact across far jumps).
func TestTokenBucketFarTimes(t *testing.T) {
	c := ratCfg{7, time.Millisecond, 3}
	e := newRatBucket(t, c, engine.NewManualClock(time.Unix(0, 0)))
	if d := e.AllowAt("k", 1, time.Unix(0, -1)); d.Allowed || d.RetryAfter != engine.Never {
		t.Fatalf("1969: %+v", d)
	}
	if d := e.AllowAt("k", 3, time.Unix(0, 0)); !d.Allowed {
		t.Fatalf("1970-01-01T00:00:00: %+v", d)
	}
	if d := e.AllowAt("k", 1, time.Unix(0, 0)); d.Allowed {
		t.Fatalf("Burst+1 at 1970: %+v", d)
	}
	// Jump 200 years: full again, exactly Burst.
	far := time.Unix(0, 0).Add(200 * 365 * 24 * time.Hour)
	if d := e.AllowAt("k", 3, far); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("200 years on: %+v", d)
	}
	if d := e.AllowAt("k", 1, far); d.Allowed {
		t.Fatalf("Burst+1 200 years on: %+v", d)
	}
	// Near 2262: the last ns.
	last := time.Unix(0, math.MaxInt64)
	e2 := newRatBucket(t, c, engine.NewManualClock(last))
	if d := e2.AllowAt("k", 3, last); !d.Allowed {
		t.Fatalf("at the last ns: %+v", d)
	}
	if d := e2.AllowAt("k", 1, last); d.Allowed || d.RetryAfter != engine.Never {
		t.Fatalf("at the last ns, an empty bucket: %+v, want refused with Never", d)
	}
	if d := e2.AllowAt("k", 1, last.Add(time.Nanosecond)); d.Allowed || d.RetryAfter != engine.Never {
		t.Fatalf("past 2262: %+v", d)
	}
	// 1 ms before the end: the unit due after it still fits in range.
	near := time.Unix(0, math.MaxInt64-int64(time.Millisecond))
	e3 := newRatBucket(t, c, engine.NewManualClock(near))
	e3.AllowAt("k", 3, near)
	d := e3.AllowAt("k", 1, near)
	want := time.Duration(ratCeil(big.NewRat(1_000_000, 7)))
	if d.Allowed || d.RetryAfter != want {
		t.Fatalf("near 2262: %+v, want RetryAfter %v", d, want)
	}
	if d := e3.AllowAt("k", 1, near.Add(want)); !d.Allowed {
		t.Fatalf("near 2262 at RetryAfter: %+v", d)
	}
}

// Guards Decision.RetryAfter doc "It counts from the
// request's own now, also when now was older than the key's newest time and
// the decision was made there", with design.md §11 "a t older than the
// ring's base is decided at the base".
func TestTokenBucketOlderThanBaseRetryAfter(t *testing.T) {
	t1 := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	e := newRatBucket(t, ratCfg{10, time.Second, 5}, engine.NewManualClock(t1))
	e.AllowAt("k", 5, t1)
	older := t1.Add(-500 * time.Millisecond)
	d := e.AllowAt("k", 1, older)
	if d.Allowed || d.RetryAfter != 600*time.Millisecond {
		t.Fatalf("older than base: %+v, want refused, RetryAfter 600ms", d)
	}
	if d := e.AllowAt("k", 1, older.Add(600*time.Millisecond-1)); d.Allowed {
		t.Fatal("admitted 1 ns before RetryAfter")
	}
	if d := e.AllowAt("k", 1, older.Add(600*time.Millisecond)); !d.Allowed {
		t.Fatalf("refused at RetryAfter: %+v", d)
	}
}

// Guards design.md §11 "The window bound": "there are no
// false admissions, and no false denials either", and "Eviction" (a
// reclaimed key starts full, exactly the old state). Phases at frozen
// instants: racing writers drain the bucket; each phase admits exactly what
// rational GCRA admits at that instant, with sweeps and moves in between.
func TestTokenBucketPhasesExact(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []ratCfg{{7, time.Millisecond, 3}, {engine.MaxLimit, 1 << 59, 2}, {3, 10, 5}, {engine.MaxLimit, 1, 5}, {10, time.Second, 5}, {999_999, 24 * time.Hour, 1}} {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			clk := engine.NewManualClock(time.Unix(0, t0))
			e, err := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: c.L, Window: c.W, Burst: c.B, Clock: clk, SweepInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			m := &ratModel{L: c.L, W: int64(c.W), B: c.burst()}
			tauNs := ratCeil(m.tau())
			rng := rand.New(rand.NewSource(3))
			now := t0
			for phase := 0; phase < 400; phase++ {
				switch rng.Intn(4) {
				case 0:
					now += rng.Int63n(tauNs + 1)
				case 1:
					now += tauNs // exactly full again (at least)
				case 2:
					now += rng.Int63n(3*tauNs + 1)
				case 3:
					now += ratCeil(new(big.Rat).Quo(m.tau(), big.NewRat(2, 1)))
				}
				clk.Set(time.Unix(0, now))
				if rng.Intn(2) == 0 {
					e.Sweep()
				}
				want := int64(0)
				for {
					ok, _, _ := m.decide(now, 1, true)
					if !ok {
						break
					}
					want++
				}
				var got atomic.Int64
				var wg sync.WaitGroup
				for g := 0; g < 4; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := int64(0); i <= c.burst(); i++ {
							if e.AllowAt("k", 1, time.Unix(0, now)).Allowed {
								got.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				if got.Load() != want {
					t.Fatalf("phase %d at +%d ns: admitted %d, rational GCRA admits %d", phase, now-t0, got.Load(), want)
				}
			}
		})
	}
}
