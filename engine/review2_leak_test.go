package engine_test

// Tests written by a second adversarial review of the engine (public API
// and documented promises): ADV2-n tests reproduce the defects it found,
// each failing before its fix; "Held" tests the attacks that did not break
// it.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// ADV2-4 (low). A KeyLimit that panics (a policy lookup that fails) while
// a revive writer holds the ring it retired: the panic unwinds out of
// engine.replace after the retire CAS and before Replace/Remove, so the
// retired ring stays in the table. Sweeps left rings retired by someone
// else, so unless another request for that same key came, it was never
// reclaimed and held its MaxKeys slot forever; now a sweep removes it once
// the clock reaches its retirement time.
func TestAdv2PanickingKeyLimitLeavesRetiredRing(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clk := engine.NewManualClock(t0)
	var boom atomic.Bool
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 10, Clock: clk, MaxKeys: 1, SweepInterval: time.Hour,
		KeyLimit: func(string) int64 {
			if boom.Load() {
				panic("policy store unavailable")
			}
			return 0
		}})
	require.True(t, e.Allow("k"))
	boom.Store(true)
	func() {
		defer func() { _ = recover() }()
		e.AllowAt("k", 1, t0.Add(100*time.Millisecond*(1<<21)))
	}()
	boom.Store(false)
	// The key's time is now the far writer's (its ring was retired there):
	// a sweep removes it once the engine's clock reaches that time, not
	// before, and never needs another request for the key.
	clk.Advance(time.Hour)
	assert.Zero(t, e.Sweep())
	clk.Set(t0.Add(100 * time.Millisecond * (1 << 21)).Add(time.Hour))
	assert.Equal(t, 1, e.Sweep())
	d := e.AllowN("other", 1)
	assert.True(t, d.Allowed, "the only MaxKeys slot is held by a retired ring: %+v (%v), Len %d", d, d.Reason(), e.Len())
}
