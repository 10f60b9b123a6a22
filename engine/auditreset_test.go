package engine_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// The self-audit across Engine.Reset: the units a Reset forgot leave the
// audit's log too, and the key's decisions are not judged until they have
// left the window, so a Reset never shows as a false admit.

func TestAuditAcrossReset(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 5, Algorithm: alg, Audit: 1, DisableEviction: true})
			require.Equal(t, int64(5), fillAt(e, "k", t0)) // 5 admits and a deny, judged
			require.True(t, e.Reset("k"))
			require.Equal(t, int64(5), fillAt(e, "k", t0)) // on the fresh count: not judged
			// One Window and one sub-window after the key's newest time
			// (SlidingLog and FixedWindow: a whole Window is the sub-window)
			// the forgotten units are out of every window judged.
			after := t0.Add(time.Second + 200*time.Millisecond)
			if alg == engine.FixedWindow {
				after = t0.Add(2 * time.Second)
			}
			require.Equal(t, int64(5), fillAt(e, "k", after))
			rep := e.Audit()
			require.Equal(t, int64(0), rep.FalseAdmits, "%+v", rep)
			require.Equal(t, int64(0), rep.FalseDenies, "%+v", rep)
			require.Equal(t, int64(18), rep.Decisions)
			require.Equal(t, int64(12), rep.Judged, "%+v", rep)
			require.Equal(t, int64(6), rep.Unjudged, "%+v", rep)
			require.Equal(t, 1.0, rep.WorstWindow, "the fresh units alone, not the forgotten ones with them")
		})
	}
}

// A Reset that finds the audit's buffer full is counted in Dropped, and
// quarantines the window after it: the fresh admissions are not judged
// against the forgotten units, which the log still holds.
func TestAuditResetDropped(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 5, Algorithm: engine.SlidingWindowStrict, Audit: 1, AuditBuffer: engine.MinAuditBuffer, DisableEviction: true})
	require.NoError(t, e.Close()) // no background drain: the buffer fills
	require.Equal(t, int64(5), fillAt(e, "k", t0))
	e.Audit() // the log holds k's 5 units
	// Decisions fill 7/8 of the buffer, Resets the last eighth.
	for j := 0; j < engine.MinAuditBuffer*7/8; j++ {
		require.True(t, e.AllowAt(fmt.Sprint("other", j), 1, t0).Allowed)
	}
	for j := 0; j < engine.MinAuditBuffer/8; j++ {
		require.True(t, e.Reset(fmt.Sprint("other", j)))
	}
	require.True(t, e.Reset("k"))
	require.Equal(t, int64(1), e.Audit().Dropped, "the Reset of k")
	require.Equal(t, int64(5), fillAt(e, "k", t0))
	rep := e.Audit()
	require.Equal(t, int64(1), rep.Dropped)
	require.Equal(t, int64(0), rep.FalseAdmits, "%+v", rep)
	// The quarantine is the buffer's, for every key: the 56 other
	// decisions at t0 are in it too.
	require.Equal(t, int64(6+56), rep.Unjudged, "k's fresh decisions and the others: %+v", rep)
	require.Equal(t, int64(6), rep.Judged, "k's decisions before the Reset: %+v", rep)
}

// Deciders racing Resets, the audit on every key: whatever order the
// buffer holds the decisions of the old and the fresh counts in, the audit
// reports no false admit for the algorithms that make none (Strict, the
// log). Without the audit's side of Reset, the fresh admissions are judged
// against the forgotten units.
func TestAuditResetConcurrent(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, AuditBuffer: 1 << 20, DisableEviction: true})
			var now atomic.Int64 // ns after t0, moved on by the resetter
			var stop atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; !stop.Load(); i++ {
					e.Reset(fmt.Sprint("k", i%2))
					now.Add(int64(3 * time.Millisecond))
					if i%64 == 0 {
						e.Audit() // a drain at a random point
					}
				}
			}()
			burst(t, func(g int) error {
				for i := 0; i < 3000; i++ {
					at := t0.Add(time.Duration(now.Load()))
					e.AllowAt(fmt.Sprint("k", g%2), 1, at)
				}
				return nil
			})
			stop.Store(true)
			<-done
			// The resetter may have run between every pair of decisions on
			// a loaded machine; a key's decisions over two windows after it
			// stopped give the audit something to judge on any machine.
			end := t0.Add(time.Duration(now.Load()))
			for i := range 40 {
				e.AllowAt("k0", 1, end.Add(time.Duration(i)*50*time.Millisecond))
			}
			rep := e.Audit()
			require.Zero(t, rep.Dropped)
			require.Zero(t, rep.FalseAdmits, "%+v", rep)
			require.Positive(t, rep.Judged, "%+v", rep)
			require.LessOrEqual(t, rep.WorstWindow, 1.0)
		})
	}
}
