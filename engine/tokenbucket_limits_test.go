package engine_test

import (
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// The token bucket's limits: Config validation, n far above Burst, and
// the largest bursts.

// Guards Config.Burst doc ("0 means Limit; otherwise 1 …
// MaxLimit. Other algorithms refuse it (0 only). New refuses a bucket whose
// Burst·Window/gcd(Limit, Window) is above 2^60") and the brief's "an error
// names the field".
func TestTokenBucketConfigValidation(t *testing.T) {
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

// Guards "n above Burst is refused with Never, and nothing
// in the arithmetic overflows for n near MaxInt64".
func TestTokenBucketHugeNAndCharge(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range ratCfgs {
		e := newRatBucket(t, c, engine.NewManualClock(at))
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

// Guards design.md §11 "nothing overflows for any valid
// Limit, Window and Burst, and any n", at Burst = MaxLimit with the largest
// W' it allows (MaxLimit per 2^20 ns: T = 2^20/(2^40−1) ns).
func TestTokenBucketHugeBurst(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := ratCfg{engine.MaxLimit, 1 << 20, engine.MaxLimit}
	e := newRatBucket(t, c, engine.NewManualClock(at))
	if d := e.AllowAt("k", engine.MaxLimit, at); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("full burst: %+v", d)
	}
	if d := e.AllowAt("k", 1, at); d.Allowed || d.RetryAfter != 1 {
		t.Fatalf("one more: %+v, want RetryAfter 1ns", d)
	}
	per := ratFloor(big.NewRat(engine.MaxLimit, 1<<20)) // units refilled per ns
	if d := e.AllowAt("k", per+1, at.Add(1)); d.Allowed {
		t.Fatalf("%d units 1 ns later: %+v", per+1, d)
	}
	if d := e.AllowAt("k", per, at.Add(1)); !d.Allowed {
		t.Fatalf("%d units 1 ns later refused: %+v", per, d)
	}
	if d := e.AllowAt("k", engine.MaxLimit, at.Add(1<<20)); d.Allowed {
		t.Fatalf("a full burst one Window after the burst, with 'per' taken at +1ns: %+v", d)
	}
	if d := e.AllowAt("k", engine.MaxLimit, at.Add(1<<21)); !d.Allowed {
		t.Fatalf("full again 2 Windows later: %+v", d)
	}
	r := e.ReserveAt("k", math.MaxInt64, at.Add(1<<22))
	if r.Decision().Allowed || r.Decision().RetryAfter != engine.Never {
		t.Fatalf("reserve MaxInt64: %+v", r.Decision())
	}
	r = e.ReserveAt("k", 1, at.Add(1<<22))
	if _, err := r.SettleAt(math.MaxInt64, at.Add(1<<22)); err == nil {
		t.Fatal("settle to MaxInt64 accepted")
	}
}
