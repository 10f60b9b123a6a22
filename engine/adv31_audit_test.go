package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// "ChargeAt ... An error changes nothing" and the self-audit's Charges counts
// "the charges replayed into the logs": a charge refused with ErrDebtFull is
// not replayed, so the nine admissions that still fit after it are not
// judged against units that were never charged (a false admit reported for
// Strict and SlidingLog, which "make no false admits").
func TestAdv31AuditIgnoresRefusedCharges(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg,
				DisableEviction: true, Audit: 1, MaxLogLimit: 20})
			at := advAt(0)
			require.True(t, e.AllowAt("k", 1, at).Allowed)
			big := int64(engine.MaxLimit)
			if alg == engine.SlidingLog {
				big = 20
			}
			_, err := e.ChargeAt("k", big, at)
			require.ErrorIs(t, err, engine.ErrDebtFull)
			r := e.ReserveAt("k", 1, at)
			require.True(t, r.Decision().Allowed)
			_, err = r.SettleAt(1+big, at)
			require.ErrorIs(t, err, engine.ErrDebtFull)
			for i := range 8 {
				require.True(t, e.AllowAt("k", 1, at).Allowed, "admission %d", i)
			}
			require.False(t, e.AllowAt("k", 1, at).Allowed)
			rep := e.Audit()
			require.Zero(t, rep.Charges, "%+v", rep)
			require.Zero(t, rep.FalseAdmits, "%+v", rep)
			require.Zero(t, rep.FalseDenies, "%+v", rep)
		})
	}
}

// A debt of MaxLimit units under the self-audit: the audit's log holds
// "one [entry] per admitted decision still inside its key's window" (32
// bytes each, AuditMaxEntries), so a huge charge costs one entry, and the
// decisions after it are judged with it.
func TestAdv31AuditHugeDebt(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true, Audit: 1})
		_, err := e.ChargeAt("k", engine.MaxLimit, advAt(0))
		require.NoError(t, err)
		r := e.ReserveAt("j", 1, advAt(0))
		_, err = r.SettleAt(engine.MaxLimit, advAt(0))
		require.NoError(t, err)
		require.False(t, e.AllowAt("k", 1, advAt(int64(time.Second))).Allowed)
		require.False(t, e.AllowAt("j", 1, advAt(int64(time.Second))).Allowed)
		rep := e.Audit()
		require.Equal(t, int64(2), rep.Charges, alg)
		require.LessOrEqual(t, rep.Entries, int64(4), "%v: %+v", alg, rep)
		require.Zero(t, rep.FalseDenies, "%v: %+v", alg, rep)
		require.Zero(t, rep.KeysSkipped, "%v: %+v", alg, rep)
	}
}

// The self-audit across a reclamation: a debt settled onto the key's new
// state is judged with ("a refusal over a debt is right, not a false
// deny"), and a refund that reaches nothing takes nothing out of the new
// log.
func TestAdv31AuditAcrossReclamation(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(advAt(0))
			e := newEngine(t, engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour, Audit: 1})
			r1 := e.ReserveAt("k", 5, advAt(0))
			r2 := e.ReserveAt("k", 2, advAt(0))
			require.True(t, r1.Decision().Allowed && r2.Decision().Allowed)
			clk.Advance(20 * time.Second)
			require.Equal(t, 1, e.Sweep())
			now := advAt(int64(20 * time.Second))
			require.True(t, e.AllowAt("k", 3, now).Allowed)
			_, err := r1.SettleAt(12, now) // a debt of 7 on the new state: 10 in all
			require.NoError(t, err)
			_, err = r2.SettleAt(0, now) // nothing to give back
			require.NoError(t, err)
			for range 3 {
				require.False(t, e.AllowAt("k", 1, now).Allowed)
			}
			rep := e.Audit()
			require.Zero(t, rep.FalseDenies, "%+v", rep)
			require.Zero(t, rep.FalseAdmits, "%+v", rep)
			require.Equal(t, int64(1), rep.Charges, "%+v", rep)
		})
	}
}
