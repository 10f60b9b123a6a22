package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// SetLimit counts as the key's activity, UpdateLimits does not (both as
// documented): on a key idle for W + 1.5w, a SetLimit keeps the key and its
// override through the next sweep, while an UpdateLimits override is
// reclaimed with the key, whose next request starts at the engine's limit.
func TestOnlySetLimitCountsAsActivity(t *testing.T) {
	const W = time.Second
	for _, tc := range []struct {
		name string
		set  func(e *engine.Engine) error
		want int64
	}{
		{"SetLimit", func(e *engine.Engine) error { return e.SetLimit("k", 5) }, 5},
		{"UpdateLimits", func(e *engine.Engine) error {
			return e.UpdateLimits(func(string, int64) int64 { return 5 })
		}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := engine.NewManualClock(time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC))
			e, err := engine.New(engine.Config{Limit: 8, Window: W, SubWindows: 4, PerKeyLimits: true, Shards: 1, Clock: clk, SweepInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			e.AllowN("k", 3)
			clk.Advance(W + W/4 + W/8)
			if err := tc.set(e); err != nil {
				t.Fatal(err)
			}
			clk.Advance(W/4 + W/8)
			e.Sweep()
			if d := e.AllowN("k", 1); d.Limit != tc.want {
				t.Errorf("after the sweep, Limit %d, want %d", d.Limit, tc.want)
			}
		})
	}
}
