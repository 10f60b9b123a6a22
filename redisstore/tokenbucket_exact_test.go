package redisstore

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The script's arithmetic, at fixed instants: a copy of tbSource whose TIME
// is ARGV[5] (s) and ARGV[6] (µs), and whose keys live a day (the real
// TTL, a few ms for a fast rate, would expire keys between two steps of a
// test whose time is not the server's; TestTokenBucketKeyExpires checks the
// real one). Everything else is the production script, byte for byte.
func fixedTimeScript(tb testing.TB) *redis.Script {
	tb.Helper()
	src := tbSource
	for _, r := range [][2]string{
		{"redis.call('TIME')", "{ARGV[5], ARGV[6]}"},
		{"'PX', floor((na - t) / 1000) + 1)", "'PX', 86400000)"},
	} {
		if strings.Count(src, r[0]) != 1 {
			tb.Fatalf("tbSource has %d copies of %q, want 1", strings.Count(src, r[0]), r[0])
		}
		src = strings.Replace(src, r[0], r[1], 1)
	}
	return redis.NewScript(src)
}

// t0 is a Redis TIME in µs (December 2026), the start of the fixed
// timelines.
const t0 = int64(1_796_000_000_000_000)

// tbAt drives the fixed-time script for one key.
type tbAt struct {
	tb  testing.TB
	c   *redis.Client
	s   *redis.Script
	b   *tokenBucket
	key string
}

func newTBAt(tb testing.TB, c *redis.Client, limit, burst int64, window time.Duration, key string) *tbAt {
	tb.Helper()
	b, err := newTokenBucket(limit, burst, window)
	if err != nil {
		tb.Fatal(err)
	}
	return &tbAt{tb: tb, c: c, s: fixedTimeScript(tb), b: b, key: key}
}

// argsAt is the script's ARGV for n units at now (µs), for a key whose
// limit is limit.
func (h *tbAt) argsAt(now, n, limit int64) []any {
	r, ok := h.b.rate(limit)
	if !ok {
		h.tb.Fatalf("limit %d is not exact", limit)
	}
	return append(r.args(n), now/1_000_000, now%1_000_000)
}

// at decides n units at now (µs) with the key's limit.
func (h *tbAt) at(now, n, limit int64) (allowed bool, remaining int64, retry time.Duration) {
	h.tb.Helper()
	res, err := h.s.Run(ctx, h.c, []string{h.key}, h.argsAt(now, n, limit)...).Result()
	if err != nil {
		h.tb.Fatal(err)
	}
	d, at, err := h.b.parse(res, limit)
	if err != nil {
		h.tb.Fatal(err)
	}
	if at.UnixMicro() != now {
		h.tb.Fatalf("the script decided at %d, want %d", at.UnixMicro(), now)
	}
	return d.Allowed, d.Remaining, d.RetryAfter
}

// tat reads the key's state as a rational number of µs (nil: no key).
func (h *tbAt) tat() *big.Rat {
	h.tb.Helper()
	raw, err := h.c.Get(ctx, h.key).Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		h.tb.Fatal(err)
	}
	a, b, q := decodeTBState(h.tb, raw)
	return new(big.Rat).Add(big.NewRat(a, 1), big.NewRat(b, q))
}

// A step table at fixed instants, written by hand: Limit 2 per second (T =
// 500 ms) and a bucket of 3.
func TestTokenBucketScriptSteps(t *testing.T) {
	s := redistest.Start(t)
	h := newTBAt(t, client(t, s), 2, 3, time.Second, "steps")
	const ms = 1000 // µs
	for i, st := range []struct {
		at, n   int64 // µs after t0, units
		allowed bool
		rem     int64
		retry   time.Duration
	}{
		{0, 0, true, 3, 0},                                  // a fresh key is a full bucket
		{0, 1, true, 2, 0},                                  // TAT t0+0.5s
		{0, 2, true, 0, 0},                                  // TAT t0+1.5s: capacity 3, not 4
		{0, 1, false, 0, 500 * time.Millisecond},            // one T away
		{499_999, 1, false, 0, time.Microsecond},            // 1 µs early: still refused
		{500 * ms, 1, true, 0, 0},                           // on time; TAT t0+2s
		{500 * ms, 0, true, 0, 0},                           // reads nothing more
		{2000 * ms, 3, true, 0, 0},                          // full again at t0+2s; TAT t0+3.5s
		{1000 * ms, 1, false, 0, 1500 * time.Millisecond},   // an older time gains nothing
		{3000 * ms, 2, true, 0, 0},                          // TAT t0+4.5s
		{3500 * ms, 2, false, 1, 500 * time.Millisecond},    // one unit back, two asked
		{4000 * ms, 2, true, 0, 0},                          // TAT t0+5.5s
		{100_000 * ms, 3, true, 0, 0},                       // long idle: full, not more
		{100_000 * ms, 1, false, 0, 500 * time.Millisecond}, // TAT t0+101.5s
	} {
		allowed, rem, retry := h.at(t0+st.at, st.n, 2)
		if allowed != st.allowed || rem != st.rem || retry != st.retry {
			t.Fatalf("step %d (%d units at t0+%dµs): got allowed %v, remaining %d, retry %v; want %v, %d, %v",
				i, st.n, st.at, allowed, rem, retry, st.allowed, st.rem, st.retry)
		}
	}
}

// The configurations the exactness tests run: rates whose T is not a whole
// number of ns or µs, a Window that shares no factor with 1000·Limit, the
// largest limit, and the two edges of New's bounds (depth + p + 2q = 2^53
// nearly to the unit, and p near 2^52 with Burst 1).
var tbConfigs = []struct {
	limit, burst int64
	window       time.Duration
}{
	{7, 1, time.Millisecond},
	{7, 20, time.Millisecond},
	{3, 5, time.Second + 1},
	{1000, 0, time.Second},
	{1, 4, time.Hour},
	{1<<40 - 1, 1000, time.Hour},
	{1<<40 - 1, maxBurstFor(1<<40-1, time.Second+1), time.Second + 1},
	{1, 1, 1<<52 - 1003},
}

// maxBurstFor is the largest exact burst for limit per window.
func maxBurstFor(limit int64, window time.Duration) int64 {
	w, l := int64(window), 1000*limit
	g := gcd(w, l)
	p, q := w/g, l/g
	return (MaxExact - 2*q - p) / p
}

// Each decision of random operation sequences (small and large n, time
// forward by fractions of T and by several T, repeated instants, older
// instants) matches the exact model: Allowed, Remaining and RetryAfter, to
// the nanosecond; and the stored TAT is the model's, exactly.
func TestTokenBucketScriptMatchesModel(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	ops := 1500
	if *long {
		ops = 20000
	}
	for i, cf := range tbConfigs {
		t.Run(fmt.Sprintf("L%d-B%d-W%v", cf.limit, cf.burst, cf.window), func(t *testing.T) {
			h := newTBAt(t, c, cf.limit, cf.burst, cf.window, fmt.Sprintf("model%d", i))
			burst := h.b.capacity(cf.limit)
			m := newGCRAModel(cf.limit, burst, cf.window)
			rng := rand.New(rand.NewPCG(uint64(i), 28))
			tUs := new(big.Rat).Quo(big.NewRat(int64(cf.window), 1), big.NewRat(1000*cf.limit, 1)) // T, µs
			now, admitted, denied := t0, 0, 0
			for op := range ops {
				now = stepTime(rng, now, tUs)
				n := randomUnits(rng, burst)
				wa, wr, wra := m.decide(now, n)
				ga, gr, gra := h.at(now, n, cf.limit)
				if ga != wa || gr != wr || gra != wra {
					t.Fatalf("op %d: %d units at t0+%dµs: script allowed %v, remaining %d, retry %v; model %v, %d, %v (model TAT %s)",
						op, n, now-t0, ga, gr, gra, wa, wr, wra, m.tatString())
				}
				if ga && n > 0 {
					admitted++
				} else if !ga {
					denied++
				}
				if got := h.tat(); m.tat != nil && (got == nil || got.Cmp(m.tat) != 0) {
					t.Fatalf("op %d: stored TAT %v, model %s", op, got, m.tatString())
				}
			}
			if admitted < ops/10 || denied < ops/10 {
				t.Fatalf("the sequence admitted %d and denied %d of %d: too one-sided to test the boundary", admitted, denied, ops)
			}
		})
	}
}

// stepTime moves now (µs) the way the sequences do: mostly forward by up to
// two T, sometimes not at all, sometimes by many T (the bucket refills
// whole), sometimes back (an older time).
func stepTime(rng *rand.Rand, now int64, tUs *big.Rat) int64 {
	frac := func(num, den int64) int64 { // ⌊T·num/den⌋ µs, at least 1
		x := new(big.Rat).Mul(tUs, big.NewRat(num, den))
		v := new(big.Int).Quo(x.Num(), x.Denom())
		if !v.IsInt64() || v.Int64() > 1<<45 {
			return 1 << 45
		}
		return max(1, v.Int64())
	}
	switch k := rng.IntN(20); {
	case k < 2:
		return now
	case k < 3:
		return now - rng.Int64N(frac(3, 1)+1)
	case k < 4:
		return now + frac(int64(rng.IntN(50)+1), 1)
	case k < 6:
		return now + rng.Int64N(3) // the µs around a boundary
	}
	return now + rng.Int64N(frac(2, 1)+1)
}

// randomUnits is 0 … burst, weighted to 1, to a few, and to burst itself.
func randomUnits(rng *rand.Rand, burst int64) int64 {
	switch rng.IntN(8) {
	case 0:
		return 0
	case 1:
		return burst
	case 2:
		return rng.Int64N(burst) + 1
	case 3:
		return min(burst, rng.Int64N(4)+1)
	}
	return 1
}

// No drift: after a burst of 2 at t0, unit k (k ≥ 1) of Limit 7 per 1 ms
// (T = 1000/7 µs, not a whole number of ns) is admitted at the first µs at
// or after t0 + k·T, and refused 1 µs before, with a RetryAfter that is the
// exact wait rounded up to the ns; after 200,000 units the stored TAT is
// t0 + 200,002·T exactly, and the last admission is less than 1 µs (about
// 0.035 ppm of the 28.6 s) after the ideal. (A bucket of 2 banks the < 1 µs
// by which each request, on Redis's µs clock, comes late; a bucket of 1
// is full then and the lateness is lost, as in any token bucket.)
func TestTokenBucketScriptNoDrift(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	h := newTBAt(t, c, 7, 2, time.Millisecond, "drift")
	const units = 200_000
	tUs := big.NewRat(1000, 7)
	if ok, _, _ := h.at(t0, 2, 7); !ok {
		t.Fatal("the first burst was refused")
	}
	if err := h.s.Load(ctx, c).Err(); err != nil { // the pipelines send EVALSHA
		t.Fatal(err)
	}
	type want struct {
		allowed bool
		retry   time.Duration
		k       int
	}
	var cmds []*redis.Cmd
	var wants []want
	pipe := c.Pipeline()
	check := func() {
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			d, _, err := h.b.parse(cmd.Val(), 7)
			if err != nil {
				t.Fatal(err)
			}
			if w := wants[i]; d.Allowed != w.allowed || d.RetryAfter != w.retry {
				t.Fatalf("unit %d: allowed %v, retry %v; want %v, %v", w.k, d.Allowed, d.RetryAfter, w.allowed, w.retry)
			}
		}
		cmds, wants = cmds[:0], wants[:0]
		pipe = c.Pipeline()
	}
	var last int64
	for k := 1; k <= units; k++ {
		ideal := new(big.Rat).Add(big.NewRat(t0, 1), new(big.Rat).Mul(big.NewRat(int64(k), 1), tUs))
		at := ceilRat(ideal)
		if k%5 == 0 { // 1 µs early: refused, with the exact wait
			early := at - 1
			ns := new(big.Rat).Mul(new(big.Rat).Sub(ideal, big.NewRat(early, 1)), big.NewRat(1000, 1))
			cmds = append(cmds, h.s.EvalSha(ctx, pipe, []string{h.key}, h.argsAt(early, 1, 7)...))
			wants = append(wants, want{false, time.Duration(ceilRat(ns)), k})
		}
		cmds = append(cmds, h.s.EvalSha(ctx, pipe, []string{h.key}, h.argsAt(at, 1, 7)...))
		wants = append(wants, want{true, 0, k})
		last = at
		if len(cmds) >= 2000 {
			check()
		}
	}
	check()
	end := new(big.Rat).Add(big.NewRat(t0, 1), new(big.Rat).Mul(big.NewRat(units+2, 1), tUs))
	if got := h.tat(); got.Cmp(end) != 0 {
		t.Fatalf("after %d units the TAT is %s µs, want t0 + %d·T = %s", units, got.RatString(), units+2, end.RatString())
	}
	ideal := new(big.Rat).Mul(big.NewRat(units, 1), tUs)
	lag := new(big.Rat).Sub(big.NewRat(last-t0, 1), ideal)
	if lag.Sign() < 0 || lag.Cmp(big.NewRat(1, 1)) >= 0 {
		t.Fatalf("the last unit came %s µs after the ideal %s µs, want within [0, 1)", lag.RatString(), ideal.RatString())
	}
}

// ceilRat is ⌈x⌉ for x ≥ 0.
func ceilRat(x *big.Rat) int64 {
	v := new(big.Int).Quo(x.Num(), x.Denom())
	if !x.IsInt() {
		v.Add(v, big.NewInt(1))
	}
	return v.Int64()
}

// A key's rate changes (a KeyLimit answer, a deploy) keep its TAT: under
// the same q (T = p/q µs in lowest terms) exactly, and under another q
// rounded up to the next whole µs, as tbSource says, so the change grants
// nothing. The model follows the same rule: the TAT of the last admission,
// rounded up when the current q is not the one it was written with.
func TestTokenBucketScriptRateChange(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const window = time.Millisecond
	const burst = 5
	h := newTBAt(t, c, 7, burst, window, "ratechange")
	limits := []int64{7, 3, 7000, 1} // q = 7, 3, 1, 1: 7000 and 1 share q
	m := newGCRAModel(7, burst, window)
	var writtenQ *big.Int
	rng := rand.New(rand.NewPCG(28, 7))
	now, rounded := t0, 0
	for op := range 3000 {
		limit := limits[rng.IntN(len(limits))]
		m.setRate(limit, window)
		saved := m.tat
		if m.tat != nil && m.t.Denom().Cmp(writtenQ) != 0 && !m.tat.IsInt() {
			m.tat = big.NewRat(ceilRat(m.tat), 1)
			rounded++
		}
		now = stepTime(rng, now, m.t)
		n := randomUnits(rng, burst)
		wa, wr, wra := m.decide(now, n)
		ga, gr, gra := h.at(now, n, limit)
		if ga != wa || gr != wr || gra != wra {
			t.Fatalf("op %d: %d units at t0+%dµs, limit %d: script allowed %v, remaining %d, retry %v; model %v, %d, %v (model TAT %s)",
				op, n, now-t0, limit, ga, gr, gra, wa, wr, wra, m.tatString())
		}
		if ga && n > 0 {
			writtenQ = new(big.Int).Set(m.t.Denom())
		} else {
			m.tat = saved // nothing written: the state keeps its own q
		}
		if got := h.tat(); m.tat != nil && got.Cmp(m.tat) != 0 {
			t.Fatalf("op %d: stored TAT %v, model %s", op, got, m.tatString())
		}
	}
	if rounded < 100 {
		t.Fatalf("only %d decisions met a TAT written under another q", rounded)
	}
}

// A value that is not a token bucket's state (another client's, or a
// sliding window's at the same name) is answered WRONGTYPE and left as it
// was.
func TestTokenBucketScriptForeignValue(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	h := newTBAt(t, c, 7, 2, time.Millisecond, "foreign")
	for _, v := range []string{"x", packState(5, []int64{1, 2, 3}), "h" + strings.Repeat("\x00", 24)} {
		if err := c.Set(ctx, h.key, v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := h.s.Run(ctx, c, []string{h.key}, h.argsAt(t0, 1, 7)...).Result()
		if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Fatalf("value %q: error %v, want WRONGTYPE", v, err)
		}
		if got, _ := c.Get(ctx, h.key).Result(); got != v {
			t.Fatalf("value %q became %q", v, got)
		}
	}
}
