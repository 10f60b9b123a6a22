package engine_test

import (
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Contradicts, if it fails: Config.Burst doc ("0 means Limit; otherwise 1 …
// MaxLimit. Other algorithms refuse it (0 only). New refuses a bucket whose
// Burst·Window/gcd(Limit, Window) is above 2^60") and the brief's "an error
// names the field".
func TestAdvTokenBucketConfigValidation(t *testing.T) {
	bad := []engine.Config{
		{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: -1},
		{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: math.MinInt64},
		{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: engine.MaxLimit + 1},
		{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: math.MaxInt64},
		{Algorithm: engine.SlidingWindow, Limit: 10, Window: time.Second, Burst: 5},
		{Algorithm: engine.SlidingWindowStrict, Limit: 10, Window: time.Second, Burst: 5},
		{Algorithm: engine.FixedWindow, Limit: 10, Window: time.Second, Burst: 5},
		{Algorithm: engine.SlidingLog, Limit: 10, Window: time.Second, Burst: 5},
		// design.md: Limit 999,999 per 24 h with Burst = Limit is refused.
		{Algorithm: engine.TokenBucket, Limit: 999_999, Window: 24 * time.Hour},
		// B·W' = 3·2^59 > 2^60.
		{Algorithm: engine.TokenBucket, Limit: engine.MaxLimit, Window: 1 << 59, Burst: 3},
		{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Audit: 0.5},
		{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, PerKeyLimits: true},
		{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, KeyLimit: func(string) int64 { return 3 }},
	}
	for i, c := range bad {
		e, err := engine.New(c)
		if err == nil {
			e.Close()
			t.Errorf("case %d (%+v): accepted", i, c)
			continue
		}
		if c.Burst != 0 && !strings.Contains(err.Error(), "Burst") {
			t.Errorf("case %d: error does not name Burst: %v", i, err)
		}
	}
	good := []engine.Config{
		{Algorithm: engine.TokenBucket, Limit: 1_000_000, Window: 24 * time.Hour},
		{Algorithm: engine.TokenBucket, Limit: engine.MaxLimit, Window: 1 << 59, Burst: 2},
		{Algorithm: engine.TokenBucket, Limit: engine.MaxLimit, Window: time.Nanosecond, Burst: engine.MaxLimit},
		{Algorithm: engine.TokenBucket, Limit: 1, Window: engine.MaxWindow, Burst: 1},
		{Algorithm: engine.SlidingWindow, Limit: 10, Window: time.Second, Burst: 0},
	}
	for i, c := range good {
		e, err := engine.New(c)
		if err != nil {
			t.Errorf("good case %d (%+v): %v", i, c, err)
			continue
		}
		if c.Algorithm == engine.TokenBucket {
			want := c.Burst
			if want == 0 {
				want = c.Limit
			}
			if got := e.Config().Burst; got != want && got != c.Burst {
				t.Errorf("good case %d: Config().Burst %d", i, got)
			}
		}
		e.Close()
	}
}

// Contradicts, if it fails: Reservation.Cancel doc with TokenBucket ("gives
// the units back only while they are the key's newest booking; otherwise it
// reports false and the units stay taken") and design.md §11 "Reservations".
func TestAdvTokenBucketCancelNewestOnly(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := newAdv(t, advCfg{7, time.Millisecond, 3}, engine.NewManualClock(at))
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
	e2 := newAdv(t, advCfg{7, time.Millisecond, 3}, engine.NewManualClock(at))
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

// Contradicts, if it fails: design.md §11 "Settle ... charges a larger cost
// as a debt (Charge): TAT ← max(TAT, t) + n·T whatever the bucket holds, up
// to a debt of one more Burst (TAT − t ≤ 2τ); beyond it ErrDebtFull and
// nothing is recorded. ... a bucket that owes k units admits again after
// (k+1)·T."
func TestAdvTokenBucketChargeDebt(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t0 := at.UnixNano()
	for _, c := range []advCfg{{7, time.Millisecond, 3}, {3, 10, 5}, {engine.MaxLimit, 1 << 59, 2}, {10, time.Second, 5}} {
		B := c.burst()
		T := big.NewRat(int64(c.W), c.L)
		for k := int64(0); k <= B; k++ {
			e := newAdv(t, c, engine.NewManualClock(at))
			if _, err := e.ChargeAt("k", B+k, at); err != nil {
				t.Fatalf("%v: charge B+%d: %v", c, k, err)
			}
			// owes k: admits again after (k+1)·T, not 1 ns before.
			due := t0 + advCeil(new(big.Rat).Mul(big.NewRat(k+1, 1), T))
			if d := e.AllowAt("k", 1, time.Unix(0, due-1)); d.Allowed {
				t.Fatalf("%v owing %d: admitted 1 ns before (k+1)·T", c, k)
			}
			d := e.AllowAt("k", 1, time.Unix(0, due))
			if !d.Allowed {
				t.Fatalf("%v owing %d: refused at (k+1)·T: %+v", c, k, d)
			}
		}
		// beyond one more Burst: ErrDebtFull, nothing recorded.
		e := newAdv(t, c, engine.NewManualClock(at))
		if _, err := e.ChargeAt("k", 2*B+1, at); !errors.Is(err, engine.ErrDebtFull) {
			t.Fatalf("%v: charge 2B+1 from full: %v, want ErrDebtFull", c, err)
		}
		if d := e.AllowAt("k", B, at); !d.Allowed {
			t.Fatalf("%v: a refused charge recorded something: %+v", c, d)
		}
		// Settle upward through a reservation.
		e = newAdv(t, c, engine.NewManualClock(at))
		r := e.ReserveAt("k", 1, at)
		if _, err := r.SettleAt(B+1, at); err != nil {
			t.Fatalf("%v: settle to B+1: %v", c, err)
		}
		due := t0 + advCeil(new(big.Rat).Mul(big.NewRat(2, 1), T))
		if d := e.AllowAt("k", 1, time.Unix(0, due-1)); d.Allowed {
			t.Fatalf("%v: after settle to B+1 admitted before 2·T", c)
		}
	}
}

// Contradicts, if it fails: AllowAt doc ("A now before 1970 or after
// 2262-04-11 is refused with RetryAfter Never and leaves the key untouched"),
// Decision.RetryAfter ("Never ... also when the wait would end past
// 2262-04-11"), and design.md §11 Moves (exact across far jumps).
func TestAdvTokenBucketFarTimes(t *testing.T) {
	c := advCfg{7, time.Millisecond, 3}
	e := newAdv(t, c, engine.NewManualClock(time.Unix(0, 0)))
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
	e2 := newAdv(t, c, engine.NewManualClock(last))
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
	e3 := newAdv(t, c, engine.NewManualClock(near))
	e3.AllowAt("k", 3, near)
	d := e3.AllowAt("k", 1, near)
	want := time.Duration(advCeil(big.NewRat(1_000_000, 7)))
	if d.Allowed || d.RetryAfter != want {
		t.Fatalf("near 2262: %+v, want RetryAfter %v", d, want)
	}
	if d := e3.AllowAt("k", 1, near.Add(want)); !d.Allowed {
		t.Fatalf("near 2262 at RetryAfter: %+v", d)
	}
}

func bigRat(a, b int64) *big.Rat { return big.NewRat(a, b) }
