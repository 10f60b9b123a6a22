package engine_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

func newBucket(t testing.TB, limit int64, window time.Duration, burst int64) *engine.Engine {
	t.Helper()
	return newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: limit, Window: window, Burst: burst, DisableEviction: true})
}

// The bucket starts full, refills one unit per Window/Limit, and holds at
// most Burst: a step table over fixed instants.
func TestTokenBucketSteps(t *testing.T) {
	e := newBucket(t, 10, time.Second, 5) // T = 100 ms
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		at        time.Duration
		n         int64
		allowed   bool
		remaining int64
		retry     time.Duration
	}{
		{0, 3, true, 2, 0},
		{0, 2, true, 0, 0},
		{0, 1, false, 0, 100 * time.Millisecond},
		{100*time.Millisecond - 1, 1, false, 0, 1},
		{100 * time.Millisecond, 1, true, 0, 0},
		{100 * time.Millisecond, 2, false, 0, 200 * time.Millisecond},
		{time.Hour, 5, true, 0, 0}, // refilled to Burst, never past it
		{time.Hour, 1, false, 0, 100 * time.Millisecond},
		{time.Hour, 6, false, 0, engine.Never}, // above Burst: never
		{time.Hour + 250*time.Millisecond, 0, true, 2, 0},
	}
	for i, s := range steps {
		d := e.AllowAt("k", s.n, at(s.at))
		require.Equal(t, s.allowed, d.Allowed, "step %d", i)
		require.Equal(t, s.remaining, d.Remaining, "step %d", i)
		require.Equal(t, s.retry, d.RetryAfter, "step %d", i)
		require.Equal(t, int64(5), d.Limit, "step %d: Decision.Limit is the Burst", i)
	}
}

// Burst 0 means Limit; Config reports the Burst in use.
func TestTokenBucketDefaultBurst(t *testing.T) {
	e := newBucket(t, 7, time.Millisecond, 0)
	require.Equal(t, int64(7), e.Config().Burst)
	require.True(t, e.AllowAt("k", 7, t0).Allowed)
	require.False(t, e.AllowAt("k", 1, t0).Allowed)
}

// The rate is exact although T is not a whole number of ns: at Limit 7 per
// 1 ms (T = 142,857.142… ns), once the burst is spent, the k-th unit after
// it is admitted at exactly ⌈k·T⌉, never earlier (RetryAfter leads there
// and 1 ns before it is refused), and after 200,000 units no drift at all.
// (With Burst 1 a caller who comes at ⌈k·T⌉ finds the bucket full and its
// fraction of a ns is not banked, as in any GCRA or x/time/rate: the
// bucket cannot hold more than one unit, so lateness is lost.)
func TestTokenBucketNoDrift(t *testing.T) {
	e := newBucket(t, 7, time.Millisecond, 0)
	start := t0.UnixNano()
	now := start
	require.True(t, e.AllowAt("k", 7, time.Unix(0, now)).Allowed)
	const units = 200_000
	for k := int64(1); k < units; k++ {
		d := e.AllowAt("k", 1, time.Unix(0, now))
		require.False(t, d.Allowed)
		next := now + int64(d.RetryAfter)
		want := start + (k*int64(time.Millisecond)+6)/7 // ⌈k·T⌉
		require.Equal(t, want, next, "unit %d", k)
		require.False(t, e.AllowAt("k", 1, time.Unix(0, next-1)).Allowed, "unit %d, 1 ns early", k)
		require.True(t, e.AllowAt("k", 1, time.Unix(0, next)).Allowed, "unit %d", k)
		now = next
	}
	ideal := float64(units-1) * float64(time.Millisecond) / 7
	require.InDelta(t, ideal, float64(now-start), ideal*1e-6)
}

// tbConfigs are the bucket shapes the model-based tests run: whole and
// fractional T, T below 1 ns, bursts below, at and above Limit, and one
// whose units are fine enough (L' ≈ 4.4·10^10) that a busy key moves into
// a new state every ~52 ms of its time (the rebase, Carry).
var tbConfigs = []struct {
	limit  int64
	window time.Duration
	burst  int64
}{
	{10, time.Second, 5},
	{7, time.Millisecond, 3},
	{3, 10, 4},
	{1_000_000_007, time.Second, 1000},
	{engine.MaxLimit, time.Second, 1000},
	{1, time.Hour, 1},
	{5, 3 * time.Millisecond, 20},
	{engine.MaxLimit, 1 << 59, 2}, // L' = 2^40 − 1, T ≈ 0.5 ms: the key moves every ~2 ms
}

// The engine against the exact GCRA model: random AllowAt, Reserve,
// Cancel and ChargeAt, with times mostly moving forward and sometimes
// older, every Decision field compared.
func TestTokenBucketMatchesModel(t *testing.T) {
	for ci, c := range tbConfigs {
		rng := rand.New(rand.NewPCG(uint64(ci), 28))
		tick := max(int64(c.window)/c.limit, 1) // about T
		burst := c.burst
		ops := make([]tbOp, 4000)
		for i := range ops {
			o := tbOp{kind: rng.IntN(10), key: rng.IntN(3), dt: rng.Int64N(2*tick + 1), pick: rng.IntN(1 << 20)}
			if rng.IntN(8) == 0 {
				o.back = rng.Int64N(4*tick + 1) // an older now
			}
			o.n = rng.Int64N(burst/2+1) + 1
			if rng.IntN(20) == 0 {
				o.n = burst + 1 + rng.Int64N(3)
			}
			ops[i] = o
		}
		moves := runTokenScript(t, c.limit, c.window, c.burst, ops)
		if c.window == 1<<59 {
			require.Greater(t, moves, 100, "the config meant to move its keys did not")
		}
	}
}

// tbTimeCap is where scripts stop moving the clock (2200-01-01).
var tbTimeCap = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// tbOp is one step of a token-bucket script: the clock moves dt, and the
// operation runs at the clock minus back. kind < 6 is AllowAt, < 8
// ReserveAt, 8 a Cancel of the held reservation pick picks, 9 ChargeAt.
type tbOp struct {
	kind, key, pick int
	n, dt, back     int64
}

// runTokenScript runs ops on a fresh engine and on the model, comparing
// every outcome, and returns how many times the model moved a key's base.
func runTokenScript(t *testing.T, limit int64, window time.Duration, burst int64, ops []tbOp) int {
	t.Helper()
	e := newBucket(t, limit, window, burst)
	m := newGCRAModel(limit, int64(window), burst)
	type booking struct {
		r   engine.Reservation
		at  *big.Rat
		gen int
	}
	var held []booking
	now := t0.UnixNano()
	for i, o := range ops {
		key := string(rune('a' + o.key%3))
		if o.dt < tbTimeCap-now { // scripts stay in 1970 … 2200
			now += o.dt
		}
		t1 := max(now-o.back, 0)
		n := o.n
		switch {
		case o.kind < 6:
			got := e.AllowAt(key, n, time.Unix(0, t1))
			want := m.decide(key, n, t1, true)
			requireOutcome(t, want, got, "op %d AllowAt(%s, %d, %d)", i, key, n, t1)
		case o.kind < 8:
			r := e.ReserveAt(key, n, time.Unix(0, t1))
			want := m.decide(key, n, t1, true)
			requireOutcome(t, want, r.Decision(), "op %d ReserveAt(%s, %d, %d)", i, key, n, t1)
			if want.allowed {
				held = append(held, booking{r, m.keys[key].newest, m.keys[key].gen})
			}
		case o.kind < 9 && len(held) > 0:
			j := o.pick % len(held)
			b := held[j]
			held = append(held[:j], held[j+1:]...)
			want := m.cancel(b.r.Key(), b.at, b.gen, b.r.Units())
			require.Equal(t, want, b.r.Cancel(), "op %d Cancel", i)
		case n >= 0:
			want := m.charge(key, n, t1)
			_, err := e.ChargeAt(key, n, time.Unix(0, t1))
			if want {
				require.NoError(t, err, "op %d ChargeAt(%s, %d, %d)", i, key, n, t1)
			} else {
				require.ErrorIs(t, err, engine.ErrDebtFull, "op %d ChargeAt(%s, %d, %d)", i, key, n, t1)
			}
		}
	}
	moves := 0
	for _, k := range m.keys {
		moves += k.gen
	}
	return moves
}

func requireOutcome(t *testing.T, want gcraOutcome, got engine.Decision, msg string, args ...any) {
	t.Helper()
	require.Equal(t, want.allowed, got.Allowed, append([]any{msg + ": Allowed"}, args...)...)
	require.Equal(t, want.remaining, got.Remaining, append([]any{msg + ": Remaining"}, args...)...)
	wantRetry := time.Duration(want.retryAfter)
	if want.retryAfter == math.MaxInt64 {
		wantRetry = engine.Never
	}
	require.Equal(t, wantRetry, got.RetryAfter, append([]any{msg + ": RetryAfter"}, args...)...)
}

// RetryAfter is the least wait: at it the same request fits, 1 ns earlier
// it is still refused. Checked on Peek-like copies, so that the key's state
// is the same for both probes.
func TestTokenBucketRetryAfterIsExact(t *testing.T) {
	for ci, c := range tbConfigs {
		rng := rand.New(rand.NewPCG(uint64(ci), 281))
		m := newGCRAModel(c.limit, int64(c.window), c.burst)
		tick := max(int64(c.window)/c.limit, 1)
		for i := 0; i < 300; i++ {
			e := newBucket(t, c.limit, c.window, c.burst)
			now := t0.UnixNano()
			// Drain the bucket a random amount, then ask for n.
			for j := rng.IntN(5); j >= 0; j-- {
				e.AllowAt("k", rng.Int64N(m.burst)+1, time.Unix(0, now))
				now += rng.Int64N(tick + 1)
			}
			n := rng.Int64N(m.burst) + 1
			d := e.ReserveAt("k", n, time.Unix(0, now))
			if d.Decision().Allowed {
				d.Cancel()
				continue
			}
			ra := d.Decision().RetryAfter
			require.Greater(t, ra, time.Duration(0))
			early := e.ReserveAt("k", n, time.Unix(0, now+int64(ra)-1))
			require.False(t, early.Decision().Allowed, "config %d: 1 ns before RetryAfter %v", ci, ra)
			require.True(t, e.AllowAt("k", n, time.Unix(0, now+int64(ra))).Allowed, "config %d: at RetryAfter %v", ci, ra)
		}
	}
}

// An older now gains nothing: after a request at t, a request at t − d is
// decided as at the key's base or later, never with more room than at t.
func TestTokenBucketOlderNowGainsNothing(t *testing.T) {
	e := newBucket(t, 10, time.Second, 10)
	require.True(t, e.AllowAt("k", 10, t0.Add(time.Second)).Allowed) // created at t0+1s: its base
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, time.Second, time.Hour, 10 * 365 * 24 * time.Hour} {
		got := e.AllowAt("k", 1, t0.Add(time.Second-d))
		require.False(t, got.Allowed, "%v older", d)
		require.Equal(t, int64(0), got.Remaining)
	}
	// A time before 1970 is refused with Never and changes nothing.
	d := e.AllowAt("k", 1, time.Unix(-1, 0))
	require.False(t, d.Allowed)
	require.Equal(t, engine.Never, d.RetryAfter)
}

// n near MaxInt64 never wraps: refused with Never, nothing recorded.
func TestTokenBucketHugeN(t *testing.T) {
	e := newBucket(t, engine.MaxLimit, time.Second, 1000)
	for _, n := range []int64{1001, engine.MaxLimit, math.MaxInt64, math.MaxInt64 - 1} {
		d := e.AllowAt("k", n, t0)
		require.False(t, d.Allowed)
		require.Equal(t, engine.Never, d.RetryAfter)
		r := e.ReserveAt("k", n, t0)
		require.False(t, r.Decision().Allowed)
	}
	require.Equal(t, int64(1000), e.AllowAt("k", 0, t0).Remaining)
	_, err := e.ChargeAt("k", math.MaxInt64, t0)
	require.Error(t, err)
	require.Equal(t, int64(1000), e.AllowAt("k", 0, t0).Remaining)
}

// Allow takes its own path (no Remaining, no RetryAfter); on a bucket its
// verdicts must be AllowN's, step for step, as for every algorithm.
func TestTokenBucketAllowMatchesAllowN(t *testing.T) {
	c1, c2 := engine.NewManualClock(t0), engine.NewManualClock(t0)
	cfg := engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Second, Burst: 3, DisableEviction: true}
	cfg.Clock = c1
	a := newEngine(t, cfg)
	cfg.Clock = c2
	b := newEngine(t, cfg)
	rng := rand.New(rand.NewPCG(9, 28))
	admitted := 0
	for i := 0; i < 3000; i++ {
		d := time.Duration(rng.Int64N(int64(60 * time.Millisecond))) // about 16 per second per key, against 7
		c1.Advance(d)
		c2.Advance(d)
		key := []string{"x", "y"}[rng.IntN(2)]
		got := a.Allow(key)
		require.Equal(t, b.AllowN(key, 1).Allowed, got, "step %d", i)
		if got {
			admitted++
		}
	}
	require.Greater(t, admitted, 100)
	require.Less(t, admitted, 2900)
}

// Reservation.At is the instant its units were taken from: the later of
// now and the key's theoretical arrival time before them, rounded down.
func TestTokenBucketReservationAt(t *testing.T) {
	e := newBucket(t, 7, time.Millisecond, 7) // T = 142,857.14… ns
	r := e.ReserveAt("k", 7, t0)
	require.Equal(t, t0, r.At())
	r = e.ReserveAt("k", 1, t0) // refused: nothing taken
	require.True(t, r.At().IsZero())
	later := t0.Add(time.Millisecond)
	r = e.ReserveAt("k", 2, later) // the bucket was full again at t0 + 1 ms: from now
	require.True(t, r.Decision().Allowed)
	require.Equal(t, later, r.At())
}
