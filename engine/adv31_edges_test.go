package engine_test

import (
	"context"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// The zero Reservation "is a denied one with nothing to cancel"
// (Reservation's doc): Settle and SettleAt on it report ErrNotReserved.
func TestAdv31ZeroReservationSettle(t *testing.T) {
	var r engine.Reservation
	_, err := r.SettleAt(3, advAt(0))
	require.ErrorIs(t, err, engine.ErrNotReserved)
	_, err = r.Settle(3)
	require.ErrorIs(t, err, engine.ErrNotReserved)
	require.False(t, r.Cancel())
}

// "A negative actual, a debt above MaxLimit or a now outside 1970 … 2262 is
// an error that changes nothing and claims nothing" (semantics.md): the
// reservation can still be cancelled after each of them.
func TestAdv31SettleBadInputClaimsNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true})
			at := advAt(0)
			r := e.ReserveAt("k", 3, at)
			require.True(t, r.Decision().Allowed)
			for _, c := range []struct {
				actual int64
				now    time.Time
			}{
				{-1, at},
				{math.MinInt64, at},
				{math.MaxInt64, at},
				{3 + engine.MaxLimit + 1, at},
				{5, time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)},
				{5, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
				{5, time.Time{}},
				{1, time.Unix(0, -1)},
			} {
				d, err := r.SettleAt(c.actual, c.now)
				require.Error(t, err, "SettleAt(%d, %v)", c.actual, c.now)
				require.NotErrorIs(t, err, engine.ErrSettled)
				require.Equal(t, engine.Decision{}, d)
				require.Equal(t, int64(7), e.AllowAt("k", 0, at).Remaining, "SettleAt(%d, %v) changed nothing", c.actual, c.now)
			}
			require.True(t, r.Cancel(), "no refused SettleAt claimed the reservation")
			require.Equal(t, int64(10), e.AllowAt("k", 0, at).Remaining)
		})
	}
}

// SlidingLog: units at s count iff t − W < s ≤ t, so a debt charged at T has
// left the window at T + W exactly, and a second debt as large fits the log
// then (semantics.md: "a charge past that [MaxLogLimit units in the window]
// is refused whole").
func TestAdv31LogDebtLeavesAtWindow(t *testing.T) {
	W := 4 * time.Second
	e := newEngine(t, engine.Config{Limit: 10, Window: W, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 20})
	_, err := e.ChargeAt("k", 15, advAt(0))
	require.NoError(t, err)
	_, err = e.ChargeAt("k", 15, advAt(int64(W)-1))
	require.ErrorIs(t, err, engine.ErrDebtFull)
	d, err := e.ChargeAt("k", 15, advAt(int64(W)))
	require.NoError(t, err)
	require.Equal(t, int64(0), d.Remaining)
	require.Equal(t, W, d.RetryAfter, "the second debt leaves at 2W")
	require.True(t, e.AllowAt("k", 10, advAt(2*int64(W))).Allowed)
}

// SlidingLog: a settle's refund after a charge moved the log into a larger
// allocation is returned there (design.md §3b: "Cancel follows the key's
// current ring and removes them there").
func TestAdv31LogRefundAfterGrowth(t *testing.T) {
	W := 4 * time.Second
	e := newEngine(t, engine.Config{Limit: 10, Window: W, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 1000})
	r := e.ReserveAt("k", 8, advAt(0))
	require.True(t, r.Decision().Allowed)
	_, err := e.ChargeAt("k", 5, advAt(int64(time.Second))) // 13 > 10: the log grows
	require.NoError(t, err)
	d, err := r.SettleAt(1, advAt(2*int64(time.Second)))
	require.NoError(t, err)
	require.Equal(t, int64(4), d.Remaining, "1 + 5 units live")
	// and a settle whose own debt grows the log
	r2 := e.ReserveAt("k2", 8, advAt(0))
	d, err = r2.SettleAt(100, advAt(int64(time.Second)))
	require.NoError(t, err)
	require.Equal(t, W, d.RetryAfter)
	require.True(t, e.AllowAt("k2", 10, advAt(int64(W+time.Second))).Allowed)
}

// A debt of MaxLimit units on the weighted counter, with an hour-long
// sub-window: old·(w − r) is about 2^40·2^42, past int64. design.md §1: "compared
// exactly in integers ... in 128 bits", and RetryAfter "is exact, as always".
// With L = 10, N = 4, w = 1 h, one unit fits at epoch e+4 once
// MaxLimit·(w − r) ≤ 9·w, that is r ≥ w − floor(9·w/MaxLimit) = w − 29 ns.
func TestAdv31HugeDebtWeightedRetryAfter(t *testing.T) {
	w := int64(time.Hour)
	e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Hour, SubWindows: 4, DisableEviction: true})
	strict := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Hour, SubWindows: 4, DisableEviction: true, Algorithm: engine.SlidingWindowStrict})
	d, err := e.ChargeAt("k", engine.MaxLimit, advAt(0))
	require.NoError(t, err)
	want := time.Duration(5*w - 9*w/int64(engine.MaxLimit))
	require.Equal(t, time.Duration(5*w-29), want)
	require.Equal(t, want, d.RetryAfter)
	require.False(t, e.AllowAt("k", 1, advAt(int64(want)-1)).Allowed)
	require.True(t, e.AllowAt("k", 1, advAt(int64(want))).Allowed)

	d, err = strict.ChargeAt("k", engine.MaxLimit, advAt(0))
	require.NoError(t, err)
	require.Equal(t, time.Duration(5*w), d.RetryAfter)
	_, err = strict.ChargeAt("k", 1, advAt(0))
	require.ErrorIs(t, err, engine.ErrDebtFull)
	d, err = strict.ChargeAt("k", 1, advAt(w)) // the next sub-window takes more
	require.NoError(t, err)
	require.Equal(t, time.Duration(4*w), d.RetryAfter, "from w, one unit fits at 5w beside the second debt")
	require.True(t, strict.AllowAt("k", 10, advAt(6*w)).Allowed)
}

// A debt whose wait would end past 2262-04-11 gives RetryAfter Never, never a
// wrapped, negative or short wait (Decision.RetryAfter's doc).
func TestAdv31DebtNear2262(t *testing.T) {
	last := time.Unix(0, math.MaxInt64-int64(2*time.Hour))
	for _, alg := range allAlgorithms {
		e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Hour, SubWindows: 4, Algorithm: alg, DisableEviction: true})
		d, err := e.ChargeAt("k", 50, last)
		require.NoError(t, err, alg)
		require.False(t, d.Allowed)
		require.Equal(t, engine.Never, d.RetryAfter, alg)
	}
}

// Settle after the key was reclaimed: the refund touches nothing of the new
// state ("nothing once ... the key's state was reclaimed"), and the debt is
// charged on the key's current state ("a debt is the key's").
func TestAdv31SettleAfterReclaim(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(advAt(0))
			e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour})
			r1 := e.ReserveAt("k", 5, advAt(0))
			r2 := e.ReserveAt("k", 2, advAt(0))
			clk.Advance(20 * time.Second)
			require.Equal(t, 1, e.Sweep())
			now := advAt(int64(20 * time.Second))
			require.True(t, e.AllowAt("k", 3, now).Allowed)
			d, err := r1.SettleAt(1, now)
			require.NoError(t, err)
			require.Equal(t, int64(7), d.Remaining, "the refund is not made to the new state")
			d, err = r2.SettleAt(6, now)
			require.NoError(t, err)
			require.Equal(t, int64(3), d.Remaining, "the debt of 4 is the new state's")
			require.Equal(t, int64(3), e.AllowAt("k", 0, now).Remaining)
		})
	}
}

// The caps are inclusive: a log holds "up to Config.MaxLogLimit units", a
// slot "at most 2⁴⁰ − 1 units"; one more is refused whole, and a refused
// charge records nothing.
func TestAdv31DebtCapsInclusive(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 20})
	require.True(t, e.AllowAt("k", 3, advAt(0)).Allowed)
	_, err := e.ChargeAt("k", 17, advAt(1))
	require.NoError(t, err)
	_, err = e.ChargeAt("k", 1, advAt(2))
	require.ErrorIs(t, err, engine.ErrDebtFull)
	d, err := e.ChargeAt("k", 3, advAt(int64(4*time.Second)))
	require.NoError(t, err, "the 3 admitted units left at W")
	require.False(t, d.Allowed)

	c := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: engine.SlidingWindowStrict, DisableEviction: true})
	require.True(t, c.AllowAt("k", 3, advAt(0)).Allowed)
	_, err = c.ChargeAt("k", engine.MaxLimit-3, advAt(0))
	require.NoError(t, err)
	_, err = c.ChargeAt("k", 1, advAt(0))
	require.ErrorIs(t, err, engine.ErrDebtFull)
	_, err = c.ChargeAt("k", -1, advAt(0))
	require.Error(t, err)
	_, err = c.ChargeAt("k", engine.MaxLimit+1, advAt(int64(time.Second)))
	require.Error(t, err)
	require.NotErrorIs(t, err, engine.ErrDebtFull, "n outside 0 … MaxLimit is its own error")
	d, err = c.ChargeAt("k", 0, advAt(int64(time.Second)))
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, d.RetryAfter)
	_, err = c.ChargeAt(string(make([]byte, engine.DefaultMaxKeyBytes+1)), 1, advAt(0))
	require.Error(t, err)
	_, err = c.ChargeAt("k", 1, time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC))
	require.Error(t, err)
}

// MaxKeys: a charge for a new key is refused with ErrKeysFull and creates
// nothing; a settle's debt on a key reclaimed meanwhile is refused the same
// way and "leaves the reservation settled at its n units".
func TestAdv31ChargeAtMaxKeys(t *testing.T) {
	clk := engine.NewManualClock(advAt(0))
	e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Clock: clk, MaxKeys: 1, SweepInterval: time.Hour})
	r := e.ReserveAt("a", 2, advAt(0))
	require.True(t, r.Decision().Allowed)
	_, err := e.ChargeAt("b", 1, advAt(0))
	require.ErrorIs(t, err, engine.ErrKeysFull)
	require.Equal(t, int64(1), e.Len())
	clk.Advance(time.Minute)
	require.Equal(t, 1, e.Sweep())
	require.True(t, e.AllowAt("c", 1, advAt(int64(time.Minute))).Allowed)
	_, err = r.SettleAt(5, advAt(int64(time.Minute)))
	require.ErrorIs(t, err, engine.ErrKeysFull)
	require.False(t, r.Cancel(), "settled at its n units")
	require.Equal(t, int64(1), e.Len())
}

// Debts at the edges of the arithmetic: MaxLimit in several sub-windows of
// an hour, and in a window of MaxWindow (2^60 ns, N = 1), where
// old·(w − r) is about 2^100. RetryAfter "is exact": the least wait after
// which one unit fits, (full + 1)·w + old·(w − r) ≤ L·w (design.md §1).
func TestAdv31HugeDebtsHugeWindows(t *testing.T) {
	w := int64(time.Hour)
	e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Hour, SubWindows: 4, DisableEviction: true})
	for k := range int64(4) {
		_, err := e.ChargeAt("k", engine.MaxLimit, advAt(k*w))
		require.NoError(t, err)
	}
	d := e.AllowAt("k", 1, advAt(3*w))
	require.Equal(t, time.Duration(5*w-29), d.RetryAfter, "at 7w + w − 29")
	require.False(t, e.AllowAt("k", 1, advAt(8*w-30)).Allowed)
	require.True(t, e.AllowAt("k", 1, advAt(8*w-29)).Allowed)

	big := newEngine(t, engine.Config{Limit: 10, Window: engine.MaxWindow, SubWindows: 1, DisableEviction: true})
	t1 := time.Unix(1000, 0)
	d, err := big.ChargeAt("k", engine.MaxLimit, t1)
	require.NoError(t, err)
	wantAt := int64(1)<<61 - 9437184 // floor(9·2^60/(2^40 − 1)) = 9·2^20
	require.Equal(t, time.Duration(wantAt-t1.UnixNano()), d.RetryAfter)
	require.False(t, big.AllowAt("k", 1, time.Unix(0, wantAt-1)).Allowed)
	require.True(t, big.AllowAt("k", 1, time.Unix(0, wantAt)).Allowed)
}

// "It allocates nothing" (SettleAt, except a log's growth) and ChargeAt
// "allocates nothing for an existing key".
func TestAdv31SettleChargeAllocateNothing(t *testing.T) {
	if raceOn {
		t.Skip("allocations differ under -race")
	}
	for _, alg := range allAlgorithms {
		e := newEngine(t, engine.Config{Limit: 100_000, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true, MaxLogLimit: 400_000})
		var now int64
		e.AllowAt("k", 1, advAt(0))
		// grow the log once, so that no growth comes later
		_, _ = e.ChargeAt("k", 50_000, advAt(0))
		now = int64(10 * time.Second)
		allocs := testing.AllocsPerRun(500, func() {
			now += int64(time.Millisecond)
			_, _ = e.ChargeAt("k", 2, advAt(now))
		})
		require.Zero(t, allocs, "%v ChargeAt", alg)
		allocs = testing.AllocsPerRun(500, func() {
			now += int64(time.Millisecond)
			r := e.ReserveAt("k", 1, advAt(now))
			if _, err := r.SettleAt(3, advAt(now)); err != nil {
				panic(err)
			}
		})
		require.Zero(t, allocs, "%v ReserveAt + SettleAt above", alg)
		allocs = testing.AllocsPerRun(500, func() {
			now += int64(time.Millisecond)
			r := e.ReserveAt("k", 3, advAt(now))
			if _, err := r.SettleAt(1, advAt(now)); err != nil {
				panic(err)
			}
		})
		require.Zero(t, allocs, "%v ReserveAt + SettleAt below", alg)
	}
}

// Wait over a debt: "A debt of 10·L blocks no longer than one of L", and
// Wait sleeps until the denial's RetryAfter on the engine's clock.
func TestAdv31WaitOutADebt(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(advAt(0))
			e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, MaxLogLimit: 1000})
			d, err := e.Charge("k", 100)
			require.NoError(t, err)
			want := 5 * time.Second // Strict and weighted: N+1 sub-windows (weighted: by its weight, at the end of the last)
			switch alg {
			case engine.SlidingLog, engine.FixedWindow:
				want = 4 * time.Second
			case engine.SlidingWindow:
				want = 4*time.Second + time.Second - 9*time.Second/100 // 100·(w − r) ≤ 9·w
			}
			require.Equal(t, want, d.RetryAfter)
			done := make(chan error, 1)
			go func() {
				_, err := e.Wait(context.Background(), "k", 1)
				done <- err
			}()
			for clk.Waits() == 0 {
				runtime.Gosched()
			}
			clk.Advance(want - 1)
			clk.Advance(time.Millisecond + 1) // past the jitter (at most 1 ms)
			require.NoError(t, <-done)
		})
	}
}

// ErrNotReserved: "the reservation recorded no units (it was refused, or
// reserved 0) ... Nothing was changed", and it stays unclaimed-looking:
// Cancel reports false.
func TestAdv31SettleOfNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true})
		at := advAt(0)
		require.True(t, e.AllowAt("k", 8, at).Allowed)
		denied := e.ReserveAt("k", 5, at)
		require.False(t, denied.Decision().Allowed)
		peek := e.ReserveAt("k", 0, at)
		require.True(t, peek.Decision().Allowed)
		never := e.ReserveAt("k", 11, at)
		for _, r := range []engine.Reservation{denied, peek, never} {
			d, err := r.SettleAt(7, at)
			require.ErrorIs(t, err, engine.ErrNotReserved, alg)
			require.Equal(t, engine.Decision{}, d)
			_, err = r.SettleAt(0, at)
			require.ErrorIs(t, err, engine.ErrNotReserved, alg)
			require.False(t, r.Cancel())
			require.Zero(t, r.Units())
			require.True(t, r.At().IsZero())
		}
		require.Equal(t, int64(2), e.AllowAt("k", 0, at).Remaining, alg)
	}
}

// BREAK (minor: a refused charge moves a SlidingLog key's time): ChargeAt's
// "An error changes nothing: ... ErrDebtFull when the key cannot count n
// more units", and ErrDebtFull's "Nothing was charged". On a SlidingLog
// key, a charge refused with ErrDebtFull (the window would pass
// MaxLogLimit) at a later now still moves the key's newest time to that
// now: a request made afterwards at an older now is then recorded at the
// refused charge's now instead of at the key's newest time before it, so
// its units count later and longer than they would have (a false denial
// later, never a false admission). Found by TestAdv31LogDebtCapSequences
// (seed 15: a settle's refused debt moved the time under a later
// reservation). The counters cannot show it: a counter charge is refused
// only in the key's current sub-window.
func TestAdv31RefusedChargeMovesTheKeysTime(t *testing.T) {
	W := 4 * time.Second
	e := newEngine(t, engine.Config{Limit: 40, Window: W, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 40})
	require.True(t, e.AllowAt("k", 2, advAt(0)).Allowed)
	_, err := e.ChargeAt("k", 30, advAt(int64(time.Millisecond)))
	require.NoError(t, err)
	late := advAt(int64(2 * time.Second))
	_, err = e.ChargeAt("k", 10, late) // 42 > 40
	require.ErrorIs(t, err, engine.ErrDebtFull)
	r := e.ReserveAt("k", 1, advAt(int64(time.Second)))
	require.True(t, r.Decision().Allowed, "%+v", r.Decision())
	require.Equal(t, advAt(int64(time.Second)), r.At(), "recorded at %v after the refused charge at 2s", r.At().Sub(advBase))
}

// ChargeAt's errors create nothing: a Config.KeyLimit result out of range,
// a key too long, a now outside 1970 … 2262.
func TestAdv31ChargeErrorsCreateNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true,
			KeyLimit: func(k string) int64 {
				if k == "bad" {
					return -1
				}
				return 0
			}})
		_, err := e.ChargeAt("bad", 1, advAt(0))
		require.Error(t, err, alg)
		_, err = e.ChargeAt(string(make([]byte, engine.DefaultMaxKeyBytes+1)), 1, advAt(0))
		require.Error(t, err, alg)
		_, err = e.ChargeAt("new", 1, time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC))
		require.Error(t, err, alg)
		_, err = e.ChargeAt("new", 1, time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC))
		require.Error(t, err, alg)
		_, err = e.ChargeAt("new", -1, advAt(0))
		require.Error(t, err, alg)
		require.Zero(t, e.Len(), alg)
	}
}

// Settle's refusals (ErrNotReserved, ErrSettled, bad arguments) "change
// nothing": not even the key's time, which a later now would move.
func TestAdv31SettleRefusalsKeepTheKeysTime(t *testing.T) {
	for _, alg := range allAlgorithms {
		W := int64(4 * time.Second)
		e := newEngine(t, engine.Config{Limit: 10, Window: time.Duration(W), SubWindows: 4, Algorithm: alg, DisableEviction: true})
		require.True(t, e.AllowAt("k", 8, advAt(0)).Allowed)
		denied := e.ReserveAt("k", 5, advAt(0))
		require.False(t, denied.Decision().Allowed)
		done := e.ReserveAt("k", 1, advAt(0))
		require.True(t, done.Cancel())
		live := e.ReserveAt("k", 1, advAt(0))
		late := advAt(W / 2)
		_, err := denied.SettleAt(7, late)
		require.ErrorIs(t, err, engine.ErrNotReserved)
		_, err = done.SettleAt(7, late)
		require.ErrorIs(t, err, engine.ErrSettled)
		_, err = live.SettleAt(-1, late)
		require.Error(t, err)
		r := e.ReserveAt("k", 1, advAt(1))
		require.True(t, r.Decision().Allowed, alg)
		require.True(t, r.At().Before(late), "%v: recorded at %v after refused settles at %v", alg, r.At().Sub(advBase), late.Sub(advBase))
	}
}
