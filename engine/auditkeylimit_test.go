package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// TestAuditSetLimit: a SetLimit mid-run judges each decision by the limit
// the engine used at that moment, and the worst window is a multiple of it.
func TestAuditSetLimit(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 10, Algorithm: engine.SlidingWindowStrict, Audit: 1, PerKeyLimits: true, DisableEviction: true})
	require.True(t, e.AllowAt("k", 8, t0).Allowed)
	require.NoError(t, e.SetLimitAt("k", 4, t0.Add(10*time.Millisecond)))
	// 8 units in the window, limit 4: refused, rightly.
	d := e.AllowAt("k", 1, t0.Add(20*time.Millisecond))
	require.False(t, d.Allowed)
	require.Equal(t, int64(4), d.Limit)
	require.NoError(t, e.SetLimitAt("k", 20, t0.Add(30*time.Millisecond)))
	require.True(t, e.AllowAt("k", 12, t0.Add(40*time.Millisecond)).Allowed)
	// 20 units now; a denial at limit 20 is right.
	require.False(t, e.AllowAt("k", 1, t0.Add(50*time.Millisecond)).Allowed)
	r := e.Audit()
	require.Equal(t, int64(4), r.Decisions)
	require.Equal(t, int64(2), r.Admits)
	require.Zero(t, r.FalseAdmits)
	require.Zero(t, r.FalseDenies)
	require.Equal(t, 1.0, r.WorstWindow) // 20 of 20 at 40 ms; 8 of 10 at the start
}

// Allow / AllowN / Wait / Reserve on the engine's clock, with a KeyLimit
// limit and a SetLimit override: judged with the limit the engine used.
func TestAuditClockPathsUseKeyLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, Clock: clk,
				KeyLimit: func(k string) int64 {
					if k == "small" {
						return 3
					}
					return 0
				}})
			for i := 0; i < 5; i++ {
				e.Allow("small")
			}
			for i := 0; i < 3; i++ {
				e.AllowN("small", 1)
				r := e.Reserve("small", 1)
				_ = r.Decision()
			}
			if err := e.SetLimit("big", 2); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4; i++ {
				e.Allow("big")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			e.Wait(ctx, "big", 1)
			cancel()
			rep := e.Audit()
			t.Logf("%+v", rep)
			checkReportConsistent(t, rep)
			if rep.FalseDenies != 0 || rep.FalseAdmits != 0 || rep.WorstWindow != 1 {
				t.Errorf("judged with the wrong limit? %+v", rep)
			}
			if rep.Decisions != 5+6+4 && rep.Decisions != 5+6+4+1 {
				t.Errorf("decisions %d", rep.Decisions)
			}
		})
	}
}
