package engine_test

import (
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// The token bucket's bookings and debts: Cancel gives back only the newest
// booking, ChargeAt's debt, reclamation only of full buckets, AllowAll.

// Guards Reservation.Cancel doc with TokenBucket ("gives
// the units back only while they are the key's newest booking; otherwise it
// reports false and the units stay taken") and design.md §11 "Reservations".
func TestTokenBucketCancelNewestOnly(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := newRatBucket(t, ratCfg{7, time.Millisecond, 3}, engine.NewManualClock(at))
	r1 := e.ReserveAt("k", 1, at)
	r2 := e.ReserveAt("k", 1, at)
	if !r1.Decision().Allowed || !r2.Decision().Allowed {
		t.Fatal("reservations refused")
	}
	if r1.Cancel() {
		t.Fatal("Cancel of an older booking returned true")
	}
	if d := e.AllowAt("k", 2, at); d.Allowed {
		t.Fatalf("older cancel gave units back: %+v", d)
	}
	if !r2.Cancel() {
		t.Fatal("Cancel of the newest booking returned false")
	}
	if r2.Cancel() {
		t.Fatal("second Cancel returned true")
	}
	// One unit (r1's) stays taken: 2 fit, not 3.
	if d := e.AllowAt("k", 3, at); d.Allowed {
		t.Fatalf("3 fit after cancels: %+v", d)
	}
	if d := e.AllowAt("k", 2, at); !d.Allowed {
		t.Fatalf("2 refused after the newest cancel: %+v", d)
	}
	// Cancel after time passed (a bucket refilled past the booking): a
	// booking made at a full bucket, then time passes so the bucket is full
	// again; cancelling must not create more than Burst.
	e2 := newRatBucket(t, ratCfg{7, time.Millisecond, 3}, engine.NewManualClock(at))
	r := e2.ReserveAt("k", 3, at)
	later := at.Add(time.Second)
	r.Cancel()
	if d := e2.AllowAt("k", 4, later); d.Allowed {
		t.Fatalf("4 > Burst admitted after a late cancel: %+v", d)
	}
	if d := e2.AllowAt("k", 3, later); !d.Allowed {
		t.Fatalf("3 refused at a full bucket: %+v", d)
	}
	if d := e2.AllowAt("k", 1, later); d.Allowed {
		t.Fatalf("Burst+1 at one instant after a late cancel: %+v", d)
	}
}

// Guards design.md §11 "Settle ... charges a larger cost
// as a debt (Charge): TAT ← max(TAT, t) + n·T whatever the bucket holds, up
// to a debt of one more Burst (TAT − t ≤ 2τ); beyond it ErrDebtFull and
// nothing is recorded. ... a bucket that owes k units admits again after
// (k+1)·T."
func TestTokenBucketChargeDebt(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t0 := at.UnixNano()
	for _, c := range []ratCfg{{7, time.Millisecond, 3}, {3, 10, 5}, {engine.MaxLimit, 1 << 59, 2}, {10, time.Second, 5}} {
		B := c.burst()
		T := big.NewRat(int64(c.W), c.L)
		for k := int64(0); k <= B; k++ {
			e := newRatBucket(t, c, engine.NewManualClock(at))
			if _, err := e.ChargeAt("k", B+k, at); err != nil {
				t.Fatalf("%v: charge B+%d: %v", c, k, err)
			}
			// owes k: admits again after (k+1)·T, not 1 ns before.
			due := t0 + ratCeil(new(big.Rat).Mul(big.NewRat(k+1, 1), T))
			if d := e.AllowAt("k", 1, time.Unix(0, due-1)); d.Allowed {
				t.Fatalf("%v owing %d: admitted 1 ns before (k+1)·T", c, k)
			}
			d := e.AllowAt("k", 1, time.Unix(0, due))
			if !d.Allowed {
				t.Fatalf("%v owing %d: refused at (k+1)·T: %+v", c, k, d)
			}
		}
		// beyond one more Burst: ErrDebtFull, nothing recorded.
		e := newRatBucket(t, c, engine.NewManualClock(at))
		if _, err := e.ChargeAt("k", 2*B+1, at); !errors.Is(err, engine.ErrDebtFull) {
			t.Fatalf("%v: charge 2B+1 from full: %v, want ErrDebtFull", c, err)
		}
		if d := e.AllowAt("k", B, at); !d.Allowed {
			t.Fatalf("%v: a refused charge recorded something: %+v", c, d)
		}
		// Settle upward through a reservation.
		e = newRatBucket(t, c, engine.NewManualClock(at))
		r := e.ReserveAt("k", 1, at)
		if _, err := r.SettleAt(B+1, at); err != nil {
			t.Fatalf("%v: settle to B+1: %v", c, err)
		}
		due := t0 + ratCeil(new(big.Rat).Mul(big.NewRat(2, 1), T))
		if d := e.AllowAt("k", 1, time.Unix(0, due-1)); d.Allowed {
			t.Fatalf("%v: after settle to B+1 admitted before 2·T", c)
		}
	}
}

// Guards Config.SweepInterval doc ("A TokenBucket key is
// kept until its bucket is full again") and design.md §11 "Eviction: a ring
// is reclaimable iff its bucket is full at the sweeper's now".
func TestTokenBucketReclaimOnlyWhenFull(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := engine.NewManualClock(t0)
	e, err := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Millisecond, Burst: 3, Clock: clk, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.AllowAt("k", 3, t0)
	full := t0.Add(time.Duration(ratCeil(bigRat(3_000_000, 7)))) // ⌈3·T⌉
	clk.Set(full.Add(-time.Nanosecond))
	e.Sweep()
	if e.Len() != 1 {
		t.Fatalf("a key that still owes units was reclaimed")
	}
	if d := e.AllowAt("k", 3, full.Add(-time.Nanosecond)); d.Allowed {
		t.Fatalf("3 fit 1 ns before the bucket is full: %+v", d)
	}
	clk.Set(full)
	e.Sweep()
	if d := e.AllowAt("k", 3, full); !d.Allowed {
		t.Fatalf("full bucket refused 3: %+v", d)
	}
	if d := e.AllowAt("k", 1, full); d.Allowed {
		t.Fatalf("Burst+1 after reclamation: %+v", d)
	}
	// MaxKeys: a new key while full is refused with ReasonKeysFull.
	e2, _ := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Millisecond, Burst: 3, Clock: clk, MaxKeys: 1, DisableEviction: true})
	defer e2.Close()
	e2.AllowAt("a", 1, full)
	if d := e2.AllowAt("b", 1, full); d.Allowed || d.Reason() != engine.ReasonKeysFull {
		t.Fatalf("MaxKeys: %+v %v", d, d.Reason())
	}
}

// Guards AllowAll doc ("admits every request or none") with
// TokenBucket engines: a refused AllowAll leaves the buckets as they were.
func TestTokenBucketAllowAllAllOrNothing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newRatBucket(t, ratCfg{7, time.Millisecond, 3}, engine.NewManualClock(t0))
	b := newRatBucket(t, ratCfg{3, 10, 2}, engine.NewManualClock(t0))
	i, d := engine.AllowAll(t0, engine.Request{Engine: a, Key: "k", N: 2}, engine.Request{Engine: b, Key: "k", N: 2}, engine.Request{Engine: a, Key: "k", N: 2})
	if i != 2 || d.Allowed {
		t.Fatalf("AllowAll: %d %+v, want refused at 2", i, d)
	}
	if d := a.AllowAt("k", 3, t0); !d.Allowed {
		t.Fatalf("a refused AllowAll kept units on a: %+v", d)
	}
	if d := b.AllowAt("k", 2, t0); !d.Allowed {
		t.Fatalf("a refused AllowAll kept units on b: %+v", d)
	}
}
