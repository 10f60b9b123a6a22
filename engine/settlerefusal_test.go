package engine_test

// What Settle and ChargeAt refuse changes nothing: not the counts, not
// the key's time, no key created.

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// A charge refused with ErrDebtFull changes nothing, as ChargeAt's errors
// promise: on a SlidingLog key whose window would pass MaxLogLimit, not
// even the key's newest time. A request made afterwards at an older now is
// recorded at its own time. (The refused charge moved the key's time, so
// the request was recorded at the charge's now and its units counted later
// and longer: a false denial. Found by the adversarial review's capped-log
// sequences; TestReserveCancelMatchesModel's scripts now reach the cap.)
func TestRefusedChargeKeepsTheKeysTime(t *testing.T) {
	W := 4 * time.Second
	e := newEngine(t, engine.Config{Limit: 40, Window: W, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 40})
	require.True(t, e.AllowAt("k", 2, debtAt(0)).Allowed)
	_, err := e.ChargeAt("k", 30, debtAt(int64(time.Millisecond)))
	require.NoError(t, err)
	late := debtAt(int64(2 * time.Second))
	_, err = e.ChargeAt("k", 10, late) // 42 > 40
	require.ErrorIs(t, err, engine.ErrDebtFull)
	r := e.ReserveAt("k", 1, debtAt(int64(time.Second)))
	require.True(t, r.Decision().Allowed, "%+v", r.Decision())
	require.Equal(t, debtAt(int64(time.Second)), r.At(), "recorded at %v after the refused charge at 2s", r.At().Sub(debtBase))
}

// ChargeAt's errors create nothing: a Config.KeyLimit result out of range,
// a key too long, a now outside 1970 … 2262.
func TestChargeErrorsCreateNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true,
			KeyLimit: func(k string) int64 {
				if k == "bad" {
					return -1
				}
				return 0
			}})
		_, err := e.ChargeAt("bad", 1, debtAt(0))
		require.Error(t, err, alg)
		_, err = e.ChargeAt(string(make([]byte, engine.DefaultMaxKeyBytes+1)), 1, debtAt(0))
		require.Error(t, err, alg)
		_, err = e.ChargeAt("new", 1, time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC))
		require.Error(t, err, alg)
		_, err = e.ChargeAt("new", 1, time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC))
		require.Error(t, err, alg)
		_, err = e.ChargeAt("new", -1, debtAt(0))
		require.Error(t, err, alg)
		require.Zero(t, e.Len(), alg)
	}
}

// Settle's refusals (ErrNotReserved, ErrSettled, bad arguments) "change
// nothing": not even the key's time, which a later now would move.
func TestSettleRefusalsKeepTheKeysTime(t *testing.T) {
	for _, alg := range allAlgorithms {
		W := int64(4 * time.Second)
		e := newEngine(t, engine.Config{Limit: 10, Window: time.Duration(W), SubWindows: 4, Algorithm: alg, DisableEviction: true})
		require.True(t, e.AllowAt("k", 8, debtAt(0)).Allowed)
		denied := e.ReserveAt("k", 5, debtAt(0))
		require.False(t, denied.Decision().Allowed)
		done := e.ReserveAt("k", 1, debtAt(0))
		require.True(t, done.Cancel())
		live := e.ReserveAt("k", 1, debtAt(0))
		late := debtAt(W / 2)
		_, err := denied.SettleAt(7, late)
		require.ErrorIs(t, err, engine.ErrNotReserved)
		_, err = done.SettleAt(7, late)
		require.ErrorIs(t, err, engine.ErrSettled)
		_, err = live.SettleAt(-1, late)
		require.Error(t, err)
		r := e.ReserveAt("k", 1, debtAt(1))
		require.True(t, r.Decision().Allowed, alg)
		require.True(t, r.At().Before(late), "%v: recorded at %v after refused settles at %v", alg, r.At().Sub(debtBase), late.Sub(debtBase))
	}
}

// ErrNotReserved: "the reservation recorded no units (it was refused, or
// reserved 0) ... Nothing was changed", and it stays unclaimed-looking:
// Cancel reports false.
func TestSettleOfNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true})
		at := debtAt(0)
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

// MaxKeys: a charge for a new key is refused with ErrKeysFull and creates
// nothing; a settle's debt on a key reclaimed meanwhile is refused the same
// way and "leaves the reservation settled at its n units".
func TestChargeAtMaxKeys(t *testing.T) {
	clk := engine.NewManualClock(debtAt(0))
	e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Clock: clk, MaxKeys: 1, SweepInterval: time.Hour})
	r := e.ReserveAt("a", 2, debtAt(0))
	require.True(t, r.Decision().Allowed)
	_, err := e.ChargeAt("b", 1, debtAt(0))
	require.ErrorIs(t, err, engine.ErrKeysFull)
	require.Equal(t, int64(1), e.Len())
	clk.Advance(time.Minute)
	require.Equal(t, 1, e.Sweep())
	require.True(t, e.AllowAt("c", 1, debtAt(int64(time.Minute))).Allowed)
	_, err = r.SettleAt(5, debtAt(int64(time.Minute)))
	require.ErrorIs(t, err, engine.ErrKeysFull)
	require.False(t, r.Cancel(), "settled at its n units")
	require.Equal(t, int64(1), e.Len())
}
