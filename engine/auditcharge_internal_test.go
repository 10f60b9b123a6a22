package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An admission the engine made before a charge of its key, in the same
// sub-window, but buffered after the charge (its goroutine was preempted
// between its decision and its push): the replay puts the charge first,
// and the admission's exact count then holds units it never saw. The
// audit cannot tell the two orders apart, so such an admission is
// Unjudged, never a false admit (it was one, for Strict and the log,
// before the audit knew the charges of a key's newest sub-window).
func TestAuditAdmissionBufferedAfterACharge(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindowStrict, SlidingLog, SlidingWindow, FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			e, err := New(Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, DisableEviction: true})
			require.NoError(t, err)
			e.Close() // the test chooses when drains happen
			now := time.Unix(1_700_000_000, 0)
			t0 := now.UnixNano()
			require.True(t, e.AllowAt("k", 8, now).Allowed)
			// The admission of 2, decided on the ring, not yet buffered.
			h := e.tab.Hash("k")
			r, ok := e.tab.Load(h, "k")
			require.True(t, ok)
			res := e.geo.Acquire(r, t0, 2, 10)
			require.True(t, res.Allowed)
			// A charge after it, buffered first.
			_, err = e.ChargeAt("k", 5, now)
			require.NoError(t, err)
			e.audit.record("k", e.effective(t0, res.Epoch), 2, 10, true)
			rep := e.Audit()
			require.Equal(t, int64(0), rep.FalseAdmits, "%+v", rep)
			require.Equal(t, int64(1), rep.Unjudged, "%+v", rep)
			require.Equal(t, int64(1), rep.Judged, "%+v", rep)
			require.Equal(t, 0.8, rep.WorstWindow, "the window the audit could judge")
			// A later decision of the sub-window that counted the charge,
			// and refused, is judged with it: right.
			require.False(t, e.AllowAt("k", 1, now).Allowed)
			rep = e.Audit()
			require.Equal(t, int64(0), rep.FalseDenies, "%+v", rep)
			require.Equal(t, int64(2), rep.Judged, "%+v", rep)
		})
	}
}
