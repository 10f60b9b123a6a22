package engine_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// settleConfig is the engine the step tables run on: L = 10, W = 1 s,
// N = 4 (250 ms sub-windows).
func settleConfig(alg engine.Algorithm) engine.Config {
	return engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true}
}

// Fewer, equal and more units than reserved, against the model, step by
// step: the rest goes back to the reservation's sub-window, the excess is
// a debt at the settle's time, and the Decision is one unit's at that time.
func TestSettleMatchesModel(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := settleConfig(alg)
			e := newEngine(t, cfg)
			m := newModel(cfg)
			at := func(d time.Duration) time.Time { return t0.Add(d) }
			type step struct {
				dt      time.Duration
				reserve int64 // units to reserve at dt
				actual  int64 // then settled to this, at dt + later
				later   time.Duration
			}
			for i, s := range []step{
				{0, 6, 4, 10 * ms},                 // fewer: 2 go back
				{20 * ms, 4, 4, 0},                 // equal: nothing changes
				{30 * ms, 2, 9, 40 * ms},           // more: 7 past the limit
				{300 * ms, 1, 0, 0},                // Settle(0) is Cancel
				{1300 * ms, 3, 3, 900 * ms},        // equal, late
				{2500 * ms, 5, 1, 3 * time.Second}, // fewer, long after: the sub-window left the window
				{6 * time.Second, 10, 30, 0},       // a debt of 20
				{7100 * ms, 1, 2, 0},
			} {
				r := e.ReserveAt("k", s.reserve, at(s.dt))
				md, mr := m.reserve("k", s.reserve, at(s.dt).UnixNano())
				require.Equal(t, md, r.Decision(), "step %d: reserve", i)
				if !md.Allowed {
					continue
				}
				when := at(s.dt + s.later)
				got, err := r.SettleAt(s.actual, when)
				require.NoError(t, err, "step %d", i)
				require.Equal(t, m.settle(mr, s.actual, when.UnixNano()), got, "step %d: SettleAt(%d) of %d", i, s.actual, s.reserve)
				require.Equal(t, m.peek("k", 1, when.UnixNano()), peekOne(e, "k", when), "step %d: one unit after", i)
				require.Equal(t, m.decide("k", 0, when.UnixNano()), e.AllowAt("k", 0, when), "step %d: a peek after", i)
			}
		})
	}
}

// A hand-worked Strict table: what the debt does to RetryAfter. L = 10,
// N = 4, w = 250 ms. 6 reserved at 0 and settled to 16 at 100 ms: the
// sub-window [0, 250) holds 16 units; one more fits only once it has left
// the window, at 1.25 s.
func TestSettleDebtStrictByHand(t *testing.T) {
	e := newEngine(t, settleConfig(engine.SlidingWindowStrict))
	r := e.ReserveAt("k", 6, t0)
	d, err := r.SettleAt(16, t0.Add(100*ms))
	require.NoError(t, err)
	require.Equal(t, engine.Decision{Limit: 10, RetryAfter: 1150 * ms}, d)
	require.False(t, e.AllowAt("k", 1, t0.Add(1249*ms)).Allowed)
	require.Equal(t, engine.Decision{Allowed: true, Limit: 10, Remaining: 9}, e.AllowAt("k", 1, t0.Add(1250*ms)))
	// A debt of 10·L is no longer: it leaves with its sub-window.
	r = e.ReserveAt("k", 1, t0.Add(1300*ms))
	d, err = r.SettleAt(100, t0.Add(1300*ms))
	require.NoError(t, err)
	require.Equal(t, 1200*ms, d.RetryAfter, "[1.25 s, 1.5 s) leaves at 2.5 s")
}

// Once only, across copies: a second Settle, a Settle after Cancel and a
// Cancel after Settle change nothing; Cancel and Units are unchanged by it.
func TestSettleOnceAcrossCopies(t *testing.T) {
	for _, alg := range allAlgorithms {
		e := newEngine(t, settleConfig(alg))
		r := e.ReserveAt("k", 6, t0)
		cp := r
		_, err := r.SettleAt(2, t0)
		require.NoError(t, err, "%v", alg)
		_, err = cp.SettleAt(10, t0)
		require.ErrorIs(t, err, engine.ErrSettled, "%v", alg)
		_, err = r.SettleAt(1, t0)
		require.ErrorIs(t, err, engine.ErrSettled, "%v", alg)
		require.False(t, cp.Cancel(), "%v: Cancel after Settle", alg)
		require.Equal(t, int64(6), cp.Units())
		require.Equal(t, int64(8), e.AllowAt("k", 0, t0).Remaining, "%v: 2 units stay, once", alg)

		r2 := e.ReserveAt("k", 3, t0)
		list := []engine.Reservation{r2}
		require.True(t, r2.Cancel(), "%v", alg)
		for _, c := range list {
			_, err = c.SettleAt(0, t0)
			require.ErrorIs(t, err, engine.ErrSettled, "%v: Settle after Cancel", alg)
		}
		require.Equal(t, int64(8), e.AllowAt("k", 0, t0).Remaining, "%v", alg)
	}
}

// What Settle refuses changes nothing and claims nothing.
func TestSettleRefusals(t *testing.T) {
	for _, alg := range allAlgorithms {
		e := newEngine(t, settleConfig(alg))
		var zero engine.Reservation
		_, err := zero.Settle(1)
		require.ErrorIs(t, err, engine.ErrNotReserved)
		_, err = zero.SettleAt(1, t0)
		require.ErrorIs(t, err, engine.ErrNotReserved)

		peek := e.ReserveAt("k", 0, t0)
		_, err = peek.SettleAt(3, t0)
		require.ErrorIs(t, err, engine.ErrNotReserved, "%v: a reservation of 0 units", alg)

		r := e.ReserveAt("k", 7, t0)
		denied := e.ReserveAt("k", 7, t0)
		require.False(t, denied.Decision().Allowed)
		d, err := denied.SettleAt(7, t0)
		require.ErrorIs(t, err, engine.ErrNotReserved, "%v: a refused reservation", alg)
		require.Equal(t, engine.Decision{}, d)

		d, err = r.SettleAt(-1, t0)
		require.Error(t, err)
		require.Contains(t, err.Error(), "actual = -1, want ≥ 0")
		require.Equal(t, engine.Decision{}, d)
		_, err = r.SettleAt(math.MaxInt64, t0)
		require.ErrorContains(t, err, "above MaxLimit", "%v", alg)
		_, err = r.SettleAt(7+engine.MaxLimit+1, t0)
		require.ErrorContains(t, err, "above MaxLimit")
		_, err = r.SettleAt(9, time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC))
		require.ErrorContains(t, err, "before 1970")
		require.Equal(t, int64(3), e.AllowAt("k", 0, t0).Remaining, "%v: nothing changed", alg)
		// And the reservation is still unclaimed.
		require.True(t, r.Cancel(), "%v", alg)
		require.Equal(t, int64(10), e.AllowAt("k", 0, t0).Remaining)
	}
}

// A debt is accepted while the key can count it (a sub-window up to
// MaxLimit, a log up to MaxLogLimit); past that the reservation stays
// settled at its units, and the error says so.
func TestSettleDebtAtMaxLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		e := newEngine(t, settleConfig(alg))
		r := e.ReserveAt("k", 7, t0)
		actual := int64(engine.MaxLimit) // the sub-window then holds MaxLimit
		if alg == engine.SlidingLog {
			actual = engine.DefaultMaxLogLimit // the log then holds MaxLogLimit
		}
		d, err := r.SettleAt(actual, t0)
		require.NoError(t, err, "%v", alg)
		require.False(t, d.Allowed)
		require.Equal(t, int64(0), d.Remaining)
		require.NotEqual(t, engine.Never, d.RetryAfter)
		require.LessOrEqual(t, d.RetryAfter, time.Second+250*ms)

		r = e.ReserveAt("k", 3, t0.Add(2*time.Second))
		_, err = r.SettleAt(3+engine.MaxLimit, t0.Add(2*time.Second))
		require.ErrorIs(t, err, engine.ErrDebtFull, "%v", alg)
		require.ErrorContains(t, err, "charging the debt of 1099511627775")
		require.Equal(t, int64(7), e.AllowAt("k", 0, t0.Add(2*time.Second)).Remaining, "%v: the 3 units stay", alg)
		require.False(t, r.Cancel(), "%v: settled", alg)
	}
}

// ChargeAt's arguments: every refusal names what it refuses and changes
// nothing.
func TestChargeRefusals(t *testing.T) {
	kl := int64(0)
	cfg := settleConfig(engine.SlidingWindowStrict)
	cfg.MaxKeys = 2
	cfg.MaxKeyBytes = 8
	cfg.KeyLimit = func(string) int64 { return kl }
	e := newEngine(t, cfg)
	_, err := e.ChargeAt("k", -1, t0)
	require.ErrorContains(t, err, `ChargeAt("k", -1): n = -1, want 0 … 1099511627775 (MaxLimit)`)
	_, err = e.ChargeAt("k", engine.MaxLimit+1, t0)
	require.ErrorContains(t, err, "want 0 … 1099511627775")
	_, err = e.ChargeAt("k", math.MaxInt64, t0)
	require.ErrorContains(t, err, "want 0 … 1099511627775")
	d, err := e.ChargeAt(strings.Repeat("x", 9), 1, t0)
	require.ErrorContains(t, err, "the key is 9 bytes, longer than Config.MaxKeyBytes = 8")
	require.Equal(t, engine.ReasonKeyTooLong, d.Reason())
	_, err = e.ChargeAt("k", 1, time.Unix(-1, 0))
	require.ErrorContains(t, err, "before 1970")
	require.Equal(t, int64(0), e.Len(), "nothing was created")

	d, err = e.ChargeAt("k", 0, t0)
	require.NoError(t, err)
	require.Equal(t, engine.Decision{Allowed: true, Limit: 10, Remaining: 10}, d)
	require.Equal(t, int64(0), e.Len(), "n = 0 creates nothing")

	kl = engine.MaxLimit + 1
	_, err = e.ChargeAt("k", 1, t0)
	require.ErrorContains(t, err, `ChargeAt("k", 1): Config.KeyLimit returned a limit out of range`)
	kl = 0
	for _, k := range []string{"a", "b"} {
		_, err = e.ChargeAt(k, 3, t0)
		require.NoError(t, err)
	}
	_, err = e.ChargeAt("c", 3, t0)
	require.ErrorIs(t, err, engine.ErrKeysFull)
	require.Equal(t, int64(2), e.Len())
}

// A charge creates the key and records past the limit; every algorithm
// then refuses until the debt has left, as the model says.
func TestChargeMatchesModel(t *testing.T) {
	for _, alg := range allAlgorithms {
		cfg := settleConfig(alg)
		e := newEngine(t, cfg)
		m := newModel(cfg)
		for i, s := range []struct {
			dt time.Duration
			n  int64
		}{{0, 4}, {10 * ms, 20}, {260 * ms, 1}, {900 * ms, 0}, {1100 * ms, 7}, {1400 * ms, 3}, {900 * ms, 5}, {5 * time.Second, 10}} {
			now := t0.Add(s.dt)
			d, err := e.ChargeAt("k", s.n, now)
			require.NoError(t, err)
			require.Equal(t, m.charge("k", s.n, now.UnixNano()), d, "%v step %d", alg, i)
			for _, probe := range []time.Duration{0, 100 * ms, 249 * ms, 250 * ms, 999 * ms, 1250 * ms} {
				at := now.Add(probe)
				require.Equal(t, m.decide("k", 0, at.UnixNano()), e.AllowAt("k", 0, at), "%v step %d probe %v", alg, i, probe)
			}
		}
	}
}

// Counts never carry into a slot's tag: a charge that would pass 2^40 − 1
// in the key's sub-window records nothing and says ErrDebtFull. A log
// holds at most MaxLogLimit units in its window.
func TestChargeDebtFull(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		e := newEngine(t, settleConfig(alg))
		_, err := e.ChargeAt("k", engine.MaxLimit-5, t0)
		require.NoError(t, err)
		d, err := e.ChargeAt("k", 6, t0)
		require.ErrorIs(t, err, engine.ErrDebtFull, "%v", alg)
		require.ErrorContains(t, err, `ChargeAt("k", 6): the key cannot count that many more units`)
		require.False(t, d.Allowed)
		_, err = e.ChargeAt("k", 5, t0)
		require.NoError(t, err, "%v: it fits exactly", alg)
		r := e.ReserveAt("k", 1, t0)
		require.False(t, r.Decision().Allowed)
		// The next sub-window counts afresh.
		_, err = e.ChargeAt("k", engine.MaxLimit, t0.Add(time.Second))
		require.NoError(t, err, "%v", alg)
		require.Equal(t, int64(0), e.AllowAt("k", 0, t0.Add(time.Second)).Remaining)
		require.True(t, e.AllowAt("k", 10, t0.Add(3*time.Second)).Allowed, "%v: both left", alg)
	}
	cfg := settleConfig(engine.SlidingLog)
	cfg.MaxLogLimit = 100
	e := newEngine(t, cfg)
	require.True(t, e.AllowAt("k", 10, t0).Allowed)
	_, err := e.ChargeAt("k", 91, t0)
	require.ErrorIs(t, err, engine.ErrDebtFull)
	d, err := e.ChargeAt("k", 90, t0.Add(ms))
	require.NoError(t, err)
	require.Equal(t, engine.Decision{Limit: 10, RetryAfter: time.Second}, d, "the 10 admitted units must leave, then 80 of the debt: at 1 s + 1 ms")
	_, err = e.ChargeAt("k", 1, t0.Add(999*ms))
	require.ErrorIs(t, err, engine.ErrDebtFull)
	d, err = e.ChargeAt("k", 10, t0.Add(time.Second))
	require.NoError(t, err, "the 10 admitted units have left")
	require.Equal(t, time.Second, d.RetryAfter)
}

// A log grows to hold a debt (here with per-key limits: up to
// MaxLogLimit), so that a limit raised later still counts every unit; a
// reservation made before the growth still cancels into the new log.
func TestChargeGrowsTheLog(t *testing.T) {
	cfg := engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.SlidingLog, PerKeyLimits: true, MaxLogLimit: 64, DisableEviction: true}
	e := newEngine(t, cfg)
	m := newModel(cfg)
	r := e.ReserveAt("k", 2, t0)
	_, mr := m.reserve("k", 2, t0.UnixNano())
	d, err := e.ChargeAt("k", 30, t0.Add(ms))
	require.NoError(t, err)
	require.Equal(t, m.charge("k", 30, t0.Add(ms).UnixNano()), d)
	require.NoError(t, e.SetLimitAt("k", 40, t0.Add(2*ms)))
	m.setLimit("k", 40, t0.Add(2*ms).UnixNano())
	require.Equal(t, m.decide("k", 0, t0.Add(2*ms).UnixNano()), e.AllowAt("k", 0, t0.Add(2*ms)))
	require.Equal(t, int64(8), e.AllowAt("k", 0, t0.Add(2*ms)).Remaining, "40 − 32: the debt moved with the log")
	require.True(t, r.Cancel())
	require.True(t, m.cancel(mr))
	require.Equal(t, m.decide("k", 0, t0.Add(2*ms).UnixNano()), e.AllowAt("k", 0, t0.Add(2*ms)))
	// Past MaxLogLimit nothing is charged.
	_, err = e.ChargeAt("k", 35, t0.Add(3*ms))
	require.ErrorIs(t, err, engine.ErrDebtFull, "30 + 35 > 64")
	_, err = e.ChargeAt("k", 34, t0.Add(3*ms))
	require.NoError(t, err)
	m.charge("k", 34, t0.Add(3*ms).UnixNano())
	require.NoError(t, e.SetLimitAt("k", 64, t0.Add(3*ms)))
	m.setLimit("k", 64, t0.Add(3*ms).UnixNano())
	for _, p := range []time.Duration{3 * ms, 1000 * ms, 1001 * ms, 1002 * ms, 1003 * ms} {
		at := t0.Add(p).UnixNano()
		require.Equal(t, m.peek("k", 1, at), peekOne(e, "k", time.Unix(0, at)), "at %v", p)
	}
}

// peekOne is what one unit would get, recording nothing: ChargeAt of 0.
func peekOne(e *engine.Engine, key string, now time.Time) engine.Decision {
	d, err := e.ChargeAt(key, 0, now)
	if err != nil {
		panic(err)
	}
	return d
}

// stepSettleOrCharge is step i of runReserveScript when it settles an
// earlier reservation or charges a key: the Decision (one unit's, after)
// or the error must be the model's.
func stepSettleOrCharge(t testing.TB, i int, e *engine.Engine, ref *model, now time.Time, o rop, got []engine.Reservation, want []modelRes) {
	t.Helper()
	if o.charge {
		d, err := e.ChargeAt(o.key, o.n, now)
		if o.n < 0 {
			require.Error(t, err, "step %d: ChargeAt(%q, %d)", i, o.key, o.n)
			return
		}
		require.NoError(t, err, "step %d", i)
		require.Equal(t, ref.charge(o.key, o.n, now.UnixNano()), d, "step %d: ChargeAt(%q, %d, t0%+v)", i, o.key, o.n, now.Sub(t0))
		return
	}
	if len(got) == 0 {
		return
	}
	j := (o.settle - 1) % len(got)
	d, err := got[j].SettleAt(o.actual, now)
	switch mr := want[j]; {
	case mr.ev < 0:
		require.ErrorIs(t, err, engine.ErrNotReserved, "step %d: Settle of #%d", i, j)
	case o.actual < 0:
		require.ErrorContains(t, err, "want ≥ 0", "step %d", i)
	case ref.claimed[mr]:
		require.ErrorIs(t, err, engine.ErrSettled, "step %d: Settle of #%d", i, j)
	default:
		require.NoError(t, err, "step %d", i)
		require.Equal(t, ref.settle(mr, o.actual, now.UnixNano()), d, "step %d: SettleAt(%d) of #%d (%d of %q), t0%+v", i, o.actual, j, mr.n, mr.key, now.Sub(t0))
	}
}

// A log keeps every unit of its window: a reservation cancelled after a
// debt leaves exactly the others. (A log that dropped its oldest units to
// make room for a debt, as a first version did, counted 3 here instead of
// 4: the cancel took newer units out, and the dropped one was missing,
// so 2 more were admitted over a limit of 5.)
func TestLogDebtThenCancelCountsEveryUnit(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: engine.SlidingLog, MaxLogLimit: 6, DisableEviction: true})
	require.True(t, e.AllowAt("k", 1, t0).Allowed)
	r := e.ReserveAt("k", 2, t0.Add(ms))
	require.True(t, r.Decision().Allowed)
	_, err := e.ChargeAt("k", 3, t0.Add(2*ms))
	require.NoError(t, err)
	_, err = e.ChargeAt("k", 1, t0.Add(2*ms))
	require.ErrorIs(t, err, engine.ErrDebtFull, "6 units: MaxLogLimit")
	require.True(t, r.Cancel())
	require.False(t, e.AllowAt("k", 2, t0.Add(3*ms)).Allowed, "1 + 3 units held")
	require.Equal(t, engine.Decision{Allowed: true, Limit: 5}, e.AllowAt("k", 1, t0.Add(3*ms)))
}
