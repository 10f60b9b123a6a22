package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// New refuses the token bucket configurations the script cannot decide
// exactly, and the combinations it does not support, with an error naming
// the field or the option.
func TestTokenBucketNewRefuses(t *testing.T) {
	c := deadClient(t)
	tb := func(limit, burst int64, window time.Duration) engine.Config {
		return engine.Config{Algorithm: engine.TokenBucket, Limit: limit, Burst: burst, Window: window}
	}
	for _, tc := range []struct {
		cfg  engine.Config
		opts []Option
		want string
	}{
		{tb(10, 0, time.Second), []Option{WithHybrid(10*time.Millisecond, 5)}, "WithHybrid"},
		{tb(10, -1, time.Second), nil, "Config.Burst = -1"},
		{tb(10, engine.MaxLimit+1, time.Second), nil, "Config.Burst"},
		{engine.Config{Limit: 10, Burst: 5, Window: time.Second}, nil, "Config.Burst"}, // a sliding window has no burst
		// T = 1 s + 1 ns over 2^40 − 1: p/q = 90909091/99955602525000 µs,
		// so Burst·p + p + 2q ≤ 2^53 allows 96,880,167 units.
		{tb(1<<40-1, 96_880_168, time.Second+1), nil, "want Burst ≤ 96880167"},
		{tb(1, 0, 1<<52+1), nil, "Config.Window"},   // p/q = (2^52+1)/1000: 2p > 2^53
		{tb(1, 312_750, time.Hour), nil, "to fill"}, // 35.7 years: within the engine's MaxWindow, not 2^50 µs
		// p/q = 1000000001/10^11 µs: 10^8·p > 2^53 (the engine's own bound,
		// 10^8 · 1000000001 units of 1/10^8 ns ≤ 2^60, holds).
		{tb(100_000_000, 0, time.Second+1), nil, "a bucket of 100000000 units (Config.Burst, or Limit when Burst is 0)"},
		{engine.Config{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, KeyLimit: func(string) int64 { return 0 }},
			[]Option{WithFallbackLocal(0.5)}, "WithFallbackLocal with a TokenBucket and Config.KeyLimit"},
	} {
		_, err := New(c, tc.cfg, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
	// The largest exact burst is accepted, and Config reports the bucket.
	l := mustNew(t, c, tb(1<<40-1, 96_880_167, time.Second+1))
	if got := l.Config(); got.Algorithm != engine.TokenBucket || got.Burst != 96_880_167 || got.SubWindows != 0 {
		t.Fatalf("Config() = %+v", got)
	}
	l = mustNew(t, c, tb(12, 0, time.Minute))
	if got := l.Config(); got.Burst != 12 {
		t.Fatalf("Burst 0 is reported as %d, want Limit (12)", got.Burst)
	}
	if got, want := l.Key("a{b}"), "ringlimit:{a\\(b\\)}:tb"; got != want {
		t.Fatalf("Key = %q, want %q", got, want)
	}
}

// On the server's own clock, each decision matches the exact model driven
// at the Redis time the script reports: Allowed, Remaining, RetryAfter and
// Limit (the bucket's capacity). The rate (7 per 10 ms) refills while the
// test runs, so both sides of the boundary are met, whatever the speed of
// the machine.
func TestTokenBucketMatchesModelOnRedisTime(t *testing.T) {
	s := redistest.Start(t)
	const limit, burst = 7, 3
	const window = 10 * time.Millisecond
	l := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: limit, Burst: burst, Window: window})
	m := newGCRAModel(limit, burst, window)
	rng := rand.New(rand.NewPCG(28, 1))
	for i := range 400 {
		n := randomUnits(rng, burst)
		d, at, err := l.eval(ctx, "k", n, 0)
		if err != nil {
			t.Fatal(err)
		}
		wa, wr, wra := m.decide(at.UnixMicro(), n)
		want := engine.Decision{Allowed: wa, Limit: burst, Remaining: wr, RetryAfter: wra}
		if d != want {
			t.Fatalf("step %d: %d units at %d µs: %+v, model %+v (TAT %s)", i, n, at.UnixMicro(), d, want, m.tatString())
		}
	}
}

// Each decision on Redis TIME is the engine's token bucket's, driven with
// AllowAt at the time the script used: the same Decision, field by field
// (the engine and the script compute the same GCRA, each exactly, in
// different units).
func TestTokenBucketMatchesEngine(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for i, cf := range []engine.Config{
		{Algorithm: engine.TokenBucket, Limit: 7, Burst: 3, Window: 10 * time.Millisecond},
		{Algorithm: engine.TokenBucket, Limit: 3, Window: 5*time.Millisecond + 1},
		{Algorithm: engine.TokenBucket, Limit: 1000, Burst: 1, Window: time.Second},
	} {
		t.Run(fmt.Sprintf("L%d-B%d-W%v", cf.Limit, cf.Burst, cf.Window), func(t *testing.T) {
			l := mustNew(t, c, cf, WithPrefix(fmt.Sprintf("eng%d:", i)))
			ref := engineRef(t, cf)
			rng := rand.New(rand.NewPCG(uint64(i), 29))
			burst := l.Config().Burst
			var last time.Time
			for step := range 300 {
				key := []string{"a", "b{c}"}[rng.IntN(2)]
				n := randomUnits(rng, burst)
				d, at, err := l.eval(ctx, key, n, 0)
				if err != nil {
					t.Fatal(err)
				}
				if at.Before(last) {
					t.Skipf("Redis TIME went back (%v after %v): the engine clamps an older time, the script does not", at, last)
				}
				last = at
				if want := ref.AllowAt(key, n, at); d != want {
					t.Fatalf("step %d: %d units of %q at %v: redis %+v, engine %+v", step, n, key, at.UnixMicro(), d, want)
				}
			}
		})
	}
}

// A request above the bucket can never be admitted: it is refused at once,
// without a round trip, with RetryAfter Never and Limit the capacity, also
// for n near MaxInt64. Per-key rates: KeyLimit gives the key's Limit per
// Window (the rate); the capacity is Config.Burst, or the key's limit when
// Burst is 0 (each key checked against the exact model); a key whose rate
// cannot be exact, or whose limit is out of range, is refused with Never.
func TestTokenBucketNeverAndKeyLimit(t *testing.T) {
	s := redistest.Start(t)
	limits := map[string]int64{"slow": 1, "fast": 1000, "inexact": 1<<40 - 1, "out": -2}
	kl := func(k string) int64 { return limits[k] }
	const window = time.Hour
	for _, burst := range []int64{0, 4} {
		l := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 10, Burst: burst, Window: window, KeyLimit: kl},
			WithPrefix(fmt.Sprintf("b%d:", burst)))
		for _, k := range []string{"default", "slow", "fast"} {
			rate := limits[k]
			if rate == 0 {
				rate = 10
			}
			capacity := burst
			if capacity == 0 {
				capacity = rate
			}
			for _, n := range []int64{capacity + 1, math.MaxInt64, math.MinInt64, -1} {
				d, err := l.AllowN(ctx, k, n)
				if want := (engine.Decision{Limit: capacity, RetryAfter: engine.Never}); err != nil || d != want {
					t.Fatalf("burst %d key %q n %d: %+v %v, want %+v", burst, k, n, d, err, want)
				}
			}
			// The whole bucket at once, a read, and one more, against the
			// model of the key's own rate and capacity.
			m := newGCRAModel(rate, capacity, window)
			for _, n := range []int64{capacity, 0, 1} {
				d, at, err := l.eval(ctx, k, n, 0)
				if err != nil {
					t.Fatal(err)
				}
				wa, wr, wra := m.decide(at.UnixMicro(), n)
				if want := (engine.Decision{Allowed: wa, Limit: capacity, Remaining: wr, RetryAfter: wra}); d != want {
					t.Fatalf("burst %d key %q: %d units: %+v, model %+v", burst, k, n, d, want)
				}
			}
		}
		// "inexact": 2^40 − 1 per hour in a bucket of as many units needs
		// Burst·p + p + 2q > 2^53; a bucket of 4 is exact.
		refused := []string{"out"}
		if burst == 0 {
			refused = append(refused, "inexact")
		}
		for _, k := range refused {
			d, err := l.AllowN(ctx, k, 1)
			if err != nil || d.Allowed || d.RetryAfter != engine.Never {
				t.Fatalf("burst %d key %q: %+v %v, want a refusal with Never", burst, k, d, err)
			}
		}
		if st := l.Stats(); st.RedisDecisions != 0 || st.FallbackDecisions != 0 || st.Failures != 0 {
			t.Fatalf("burst %d: %+v: a refusal made a round trip or was counted (eval counts nothing)", burst, st)
		}
	}
}

// A key expires when its bucket is full again, and not before: the
// script's PX puts the key's end between its TAT and 1 ms (plus the
// script's own time) after it. The bound's slack of 1 s is far below the
// 20 minutes the bucket takes to refill here.
func TestTokenBucketKeyExpires(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Algorithm: engine.TokenBucket, Limit: 1, Burst: 3, Window: 10 * time.Minute})
	if d, _, err := l.eval(ctx, "k", 2, 0); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	raw, err := c.Get(ctx, l.Key("k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	a, b, q := decodeTBState(t, raw)
	tat := new(big.Rat).Add(big.NewRat(a, 1), big.NewRat(b, q)) // µs
	end, err := c.Do(ctx, "PEXPIRETIME", l.Key("k")).Int64()    // Unix ms
	if err != nil {
		t.Fatal(err)
	}
	endUs := big.NewRat(end*1000, 1)
	if endUs.Cmp(tat) < 0 || new(big.Rat).Sub(endUs, tat).Cmp(big.NewRat(1_000_000, 1)) > 0 {
		t.Fatalf("the key expires at %d ms, want within 1 s after its TAT %s µs", end, tat.FloatString(0))
	}
	// A read writes nothing and leaves the expiry alone.
	if d, _, err := l.eval(ctx, "k", 0, 0); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("a read: %+v %v", d, err)
	}
	if again, _ := c.Do(ctx, "PEXPIRETIME", l.Key("k")).Int64(); again != end {
		t.Fatalf("a read moved the expiry from %d to %d", end, again)
	}
}

// A backward step of the Redis host's clock (written here as a state 15 s
// in TIME's future, which is what Redis holds after such a step): the
// bucket is found emptier, never fuller, and a denial's RetryAfter counts
// the wait from TIME itself, lag included, as the exact model does.
func TestTokenBucketClockStepBack(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const limit, burst = 4, 2
	const window = time.Second // T = 250 ms
	l := mustNew(t, c, engine.Config{Algorithm: engine.TokenBucket, Limit: limit, Burst: burst, Window: window})
	_, now, err := l.eval(ctx, "probe", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// TAT 15 s + 1/7 µs ahead: the bucket is empty until TIME passes it.
	ahead := now.UnixMicro() + 15_000_000
	raw := string([]byte{'g'}) + packFloats(ahead, 1, 7)
	if err := c.Set(ctx, l.Key("k"), raw, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	d, at, err := l.eval(ctx, "k", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The model: a TAT of ahead µs (q 7 is not this rate's q = 1, so the
	// script rounds it up to the next whole µs first).
	m := newGCRAModel(limit, burst, window)
	m.tat = big.NewRat(ahead+1, 1)
	wa, wr, wra := m.decide(at.UnixMicro(), 1)
	if want := (engine.Decision{Allowed: wa, Limit: burst, Remaining: wr, RetryAfter: wra}); d != want || d.Allowed {
		t.Fatalf("%+v, model %+v", d, want)
	}
	// The lag counts: TAT − TIME + T − Burst·T, some 14.75 s, not the
	// 250 ms a wait measured from the TAT would say.
	if lag := time.Duration(ahead-at.UnixMicro()) * time.Microsecond; d.RetryAfter != lag+time.Microsecond-window/limit {
		t.Fatalf("RetryAfter %v, want the lag %v + 1 µs − 250 ms", d.RetryAfter, lag)
	}
}

// packFloats is little-endian doubles, as the scripts store them.
func packFloats(vs ...int64) string {
	b := make([]byte, 8*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(v)))
	}
	return string(b)
}
