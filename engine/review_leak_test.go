package engine_test

// Tests written by an adversarial review of the engine that had only the
// public API and the documented promises: ADV-n tests reproduce the defects
// it found (each failed before its fix), "Held" tests the attacks that did
// not break it.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// ADV-5. A far-ahead request (≥ 2^21 sub-windows past the key's newest)
// retires the key's ring and then replaces it; if Config.KeyLimit refuses
// the key at that moment (a documented way to refuse a key: a result
// outside 1…MaxLimit), the replacement never happens and the retired ring
// stays in the table. It was never reclaimed, holding a MaxKeys slot
// forever; now a sweep removes it once the clock reaches its retirement
// time.
func TestAdvRetiredRingLeaksWhenKeyLimitRefusesReplacement(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0)
			clk := engine.NewManualClock(t0)
			var blocked atomic.Bool
			e := newEngine(t, engine.Config{
				Limit: 5, Window: time.Second, SubWindows: 10, Algorithm: alg, Clock: clk, MaxKeys: 1,
				SweepInterval: time.Hour,
				KeyLimit: func(string) int64 {
					if blocked.Load() {
						return -1 // refuse this tenant from now on
					}
					return 0
				},
			})
			require.True(t, e.AllowN("k", 1).Allowed)
			blocked.Store(true)
			w := time.Second / 10
			if alg == engine.FixedWindow {
				w = time.Second
			}
			far := t0.Add(w * (1 << 21))
			d := e.AllowAt("k", 1, far)
			require.Equal(t, engine.Never, d.RetryAfter, "refused by KeyLimit")

			// The refused writer leaves the state it retired at far: the
			// key's time is far now. A sweep removes it once the engine's
			// clock has reached that time, and not before (removing it
			// earlier would raise the shard's floor past the clock).
			blocked.Store(false)
			clk.Advance(time.Hour)
			assert.Zero(t, e.Sweep(), "retired at far, ahead of the clock")
			clk.Set(far.Add(time.Hour))
			assert.Equal(t, 1, e.Sweep(), "the clock passed far: the retired state goes")
			assert.Equal(t, int64(0), e.Len(), "Len")
			d = e.AllowN("other", 1)
			assert.True(t, d.Allowed, "a new key fits under MaxKeys = 1 once the idle key is gone: %+v (%v)", d, d.Reason())
		})
	}
}
