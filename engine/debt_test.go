package engine_test

// What a debt does at the edges: a log's window and growth, RetryAfter
// with huge debts and windows, 2262, the caps, and Wait.

import (
	"context"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// debtBase is a fixed instant on the Unix grid of every sub-window used here.
var debtBase = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func debtAt(ns int64) time.Time { return time.Unix(0, debtBase.UnixNano()+ns) }

// SlidingLog: units at s count iff t − W < s ≤ t, so a debt charged at T has
// left the window at T + W exactly, and a second debt as large fits the log
// then (semantics.md: "a charge past that [MaxLogLimit units in the window]
// is refused whole").
func TestLogDebtLeavesAtWindow(t *testing.T) {
	W := 4 * time.Second
	e := newEngine(t, engine.Config{Limit: 10, Window: W, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 20})
	_, err := e.ChargeAt("k", 15, debtAt(0))
	require.NoError(t, err)
	_, err = e.ChargeAt("k", 15, debtAt(int64(W)-1))
	require.ErrorIs(t, err, engine.ErrDebtFull)
	d, err := e.ChargeAt("k", 15, debtAt(int64(W)))
	require.NoError(t, err)
	require.Equal(t, int64(0), d.Remaining)
	require.Equal(t, W, d.RetryAfter, "the second debt leaves at 2W")
	require.True(t, e.AllowAt("k", 10, debtAt(2*int64(W))).Allowed)
}

// SlidingLog: a settle's refund after a charge moved the log into a larger
// allocation is returned there (design.md §3b: "Cancel follows the key's
// current ring and removes them there").
func TestLogRefundAfterGrowth(t *testing.T) {
	W := 4 * time.Second
	e := newEngine(t, engine.Config{Limit: 10, Window: W, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 1000})
	r := e.ReserveAt("k", 8, debtAt(0))
	require.True(t, r.Decision().Allowed)
	_, err := e.ChargeAt("k", 5, debtAt(int64(time.Second))) // 13 > 10: the log grows
	require.NoError(t, err)
	d, err := r.SettleAt(1, debtAt(2*int64(time.Second)))
	require.NoError(t, err)
	require.Equal(t, int64(4), d.Remaining, "1 + 5 units live")
	// and a settle whose own debt grows the log
	r2 := e.ReserveAt("k2", 8, debtAt(0))
	d, err = r2.SettleAt(100, debtAt(int64(time.Second)))
	require.NoError(t, err)
	require.Equal(t, W, d.RetryAfter)
	require.True(t, e.AllowAt("k2", 10, debtAt(int64(W+time.Second))).Allowed)
}

// A debt of MaxLimit units on the weighted counter, with an hour-long
// sub-window: old·(w − r) is about 2^40·2^42, past int64. design.md §1: "compared
// exactly in integers ... in 128 bits", and RetryAfter "is exact, as always".
// With L = 10, N = 4, w = 1 h, one unit fits at epoch e+4 once
// MaxLimit·(w − r) ≤ 9·w, that is r ≥ w − floor(9·w/MaxLimit) = w − 29 ns.
func TestHugeDebtWeightedRetryAfter(t *testing.T) {
	w := int64(time.Hour)
	e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Hour, SubWindows: 4, DisableEviction: true})
	strict := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Hour, SubWindows: 4, DisableEviction: true, Algorithm: engine.SlidingWindowStrict})
	d, err := e.ChargeAt("k", engine.MaxLimit, debtAt(0))
	require.NoError(t, err)
	want := time.Duration(5*w - 9*w/int64(engine.MaxLimit))
	require.Equal(t, time.Duration(5*w-29), want)
	require.Equal(t, want, d.RetryAfter)
	require.False(t, e.AllowAt("k", 1, debtAt(int64(want)-1)).Allowed)
	require.True(t, e.AllowAt("k", 1, debtAt(int64(want))).Allowed)

	d, err = strict.ChargeAt("k", engine.MaxLimit, debtAt(0))
	require.NoError(t, err)
	require.Equal(t, time.Duration(5*w), d.RetryAfter)
	_, err = strict.ChargeAt("k", 1, debtAt(0))
	require.ErrorIs(t, err, engine.ErrDebtFull)
	d, err = strict.ChargeAt("k", 1, debtAt(w)) // the next sub-window takes more
	require.NoError(t, err)
	require.Equal(t, time.Duration(4*w), d.RetryAfter, "from w, one unit fits at 5w beside the second debt")
	require.True(t, strict.AllowAt("k", 10, debtAt(6*w)).Allowed)
}

// A debt whose wait would end past 2262-04-11 gives RetryAfter Never, never a
// wrapped, negative or short wait (Decision.RetryAfter's doc).
func TestDebtNear2262RetriesNever(t *testing.T) {
	last := time.Unix(0, math.MaxInt64-int64(2*time.Hour))
	for _, alg := range allAlgorithms {
		e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Hour, SubWindows: 4, Algorithm: alg, DisableEviction: true})
		d, err := e.ChargeAt("k", 50, last)
		require.NoError(t, err, alg)
		require.False(t, d.Allowed)
		require.Equal(t, engine.Never, d.RetryAfter, alg)
	}
}

// The caps are inclusive: a log holds "up to Config.MaxLogLimit units", a
// slot "at most 2⁴⁰ − 1 units"; one more is refused whole, and a refused
// charge records nothing.
func TestDebtCapsInclusive(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 20})
	require.True(t, e.AllowAt("k", 3, debtAt(0)).Allowed)
	_, err := e.ChargeAt("k", 17, debtAt(1))
	require.NoError(t, err)
	_, err = e.ChargeAt("k", 1, debtAt(2))
	require.ErrorIs(t, err, engine.ErrDebtFull)
	d, err := e.ChargeAt("k", 3, debtAt(int64(4*time.Second)))
	require.NoError(t, err, "the 3 admitted units left at W")
	require.False(t, d.Allowed)

	c := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: engine.SlidingWindowStrict, DisableEviction: true})
	require.True(t, c.AllowAt("k", 3, debtAt(0)).Allowed)
	_, err = c.ChargeAt("k", engine.MaxLimit-3, debtAt(0))
	require.NoError(t, err)
	_, err = c.ChargeAt("k", 1, debtAt(0))
	require.ErrorIs(t, err, engine.ErrDebtFull)
	_, err = c.ChargeAt("k", -1, debtAt(0))
	require.Error(t, err)
	_, err = c.ChargeAt("k", engine.MaxLimit+1, debtAt(int64(time.Second)))
	require.Error(t, err)
	require.NotErrorIs(t, err, engine.ErrDebtFull, "n outside 0 … MaxLimit is its own error")
	d, err = c.ChargeAt("k", 0, debtAt(int64(time.Second)))
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, d.RetryAfter)
	_, err = c.ChargeAt(string(make([]byte, engine.DefaultMaxKeyBytes+1)), 1, debtAt(0))
	require.Error(t, err)
	_, err = c.ChargeAt("k", 1, time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC))
	require.Error(t, err)
}

// Debts at the edges of the arithmetic: MaxLimit in several sub-windows of
// an hour, and in a window of MaxWindow (2^60 ns, N = 1), where
// old·(w − r) is about 2^100. RetryAfter "is exact": the least wait after
// which one unit fits, (full + 1)·w + old·(w − r) ≤ L·w (design.md §1).
func TestHugeDebtsHugeWindows(t *testing.T) {
	w := int64(time.Hour)
	e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Hour, SubWindows: 4, DisableEviction: true})
	for k := range int64(4) {
		_, err := e.ChargeAt("k", engine.MaxLimit, debtAt(k*w))
		require.NoError(t, err)
	}
	d := e.AllowAt("k", 1, debtAt(3*w))
	require.Equal(t, time.Duration(5*w-29), d.RetryAfter, "at 7w + w − 29")
	require.False(t, e.AllowAt("k", 1, debtAt(8*w-30)).Allowed)
	require.True(t, e.AllowAt("k", 1, debtAt(8*w-29)).Allowed)

	big := newEngine(t, engine.Config{Limit: 10, Window: engine.MaxWindow, SubWindows: 1, DisableEviction: true})
	t1 := time.Unix(1000, 0)
	d, err := big.ChargeAt("k", engine.MaxLimit, t1)
	require.NoError(t, err)
	wantAt := int64(1)<<61 - 9437184 // floor(9·2^60/(2^40 − 1)) = 9·2^20
	require.Equal(t, time.Duration(wantAt-t1.UnixNano()), d.RetryAfter)
	require.False(t, big.AllowAt("k", 1, time.Unix(0, wantAt-1)).Allowed)
	require.True(t, big.AllowAt("k", 1, time.Unix(0, wantAt)).Allowed)
}

// Wait over a debt: "A debt of 10·L blocks no longer than one of L", and
// Wait sleeps until the denial's RetryAfter on the engine's clock.
func TestWaitOutADebt(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(debtAt(0))
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
