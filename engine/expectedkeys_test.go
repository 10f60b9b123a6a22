package engine_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Config.ExpectedKeys changes where states live, never a decision: an
// engine with it and one without, driven through the same 40,000 calls
// (AllowAt with n of 0 … 2, reservations cancelled or kept, Reset,
// per-key limits, idle stretches whose sweeps reclaim most keys, and a
// table that grows to three times the expected count), answer alike, and
// hold as many keys, for every algorithm.
func TestExpectedKeysChangesNoDecision(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog, engine.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			cfg := engine.Config{Algorithm: alg, Limit: 7, Window: time.Second, Shards: 4, Clock: clk, SweepInterval: time.Hour, PerKeyLimits: alg != engine.TokenBucket}
			off := newEngine(t, cfg)
			cfg.ExpectedKeys = 1000
			on := newEngine(t, cfg)
			if got := on.Config().ExpectedKeys; got != 1000 {
				t.Fatalf("Config().ExpectedKeys = %d, want 1000", got)
			}
			keys := tableKeys(3000 - 1000)
			rng := rand.New(rand.NewPCG(uint64(alg), 29))
			now := t0
			for step := range 40_000 {
				if step%8_000 == 7_999 { // an idle stretch: most keys are reclaimed
					now = now.Add(3 * time.Second)
					clk.Set(now)
					if a, b := on.Sweep(), off.Sweep(); a != b {
						t.Fatalf("step %d: Sweep reclaimed %d keys with ExpectedKeys, %d without", step, a, b)
					}
				}
				now = now.Add(time.Duration(rng.IntN(int(time.Millisecond))))
				clk.Set(now)
				k := keys[rng.IntN(len(keys))]
				n := int64(rng.IntN(3))
				switch op := rng.IntN(100); {
				case op < 3:
					if a, b := on.Reset(k), off.Reset(k); a != b {
						t.Fatalf("step %d: Reset(%q) = %v with ExpectedKeys, %v without", step, k, a, b)
					}
				case op < 5 && cfg.PerKeyLimits:
					l := int64(1 + rng.IntN(9))
					a, b := on.SetLimitAt(k, l, now), off.SetLimitAt(k, l, now)
					if fmt.Sprint(a) != fmt.Sprint(b) {
						t.Fatalf("step %d: SetLimitAt(%q, %d) = %v with ExpectedKeys, %v without", step, k, l, a, b)
					}
				case op < 15:
					ra, rb := on.ReserveAt(k, n, now), off.ReserveAt(k, n, now)
					if ra.Decision() != rb.Decision() {
						t.Fatalf("step %d: ReserveAt(%q, %d) = %+v with ExpectedKeys, %+v without", step, k, n, ra.Decision(), rb.Decision())
					}
					if rng.IntN(2) == 0 {
						if a, b := ra.Cancel(), rb.Cancel(); a != b {
							t.Fatalf("step %d: Cancel of %q = %v with ExpectedKeys, %v without", step, k, a, b)
						}
					}
				default:
					if a, b := on.AllowAt(k, n, now), off.AllowAt(k, n, now); a != b {
						t.Fatalf("step %d: AllowAt(%q, %d) = %+v with ExpectedKeys, %+v without", step, k, n, a, b)
					}
				}
			}
			if on.Len() != off.Len() {
				t.Fatalf("Len %d with ExpectedKeys, %d without", on.Len(), off.Len())
			}
		})
	}
}
