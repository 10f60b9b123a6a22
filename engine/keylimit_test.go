package engine_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression: A KeyLimit that panics (a policy lookup that fails) while
// a revive writer holds the ring it retired: the panic unwinds out of
// engine.replace after the retire CAS and before Replace/Remove, so the
// retired ring stays in the table. Sweeps left rings retired by someone
// else, so unless another request for that same key came, it was never
// reclaimed and held its MaxKeys slot forever; now a sweep removes it once
// the clock reaches its retirement time.
func TestSweepReclaimsRingRetiredByPanickingKeyLimit(t *testing.T) {
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

// Regression: A far-ahead request (≥ 2^21 sub-windows past the key's newest)
// retires the key's ring and then replaces it; if Config.KeyLimit refuses
// the key at that moment (a documented way to refuse a key: a result
// outside 1…MaxLimit), the replacement never happens and the retired ring
// stays in the table. It was never reclaimed, holding a MaxKeys slot
// forever; now a sweep removes it once the clock reaches its retirement
// time.
func TestSweepReclaimsRingRetiredWhenKeyLimitRefuses(t *testing.T) {
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

// A KeyLimit that consults the engine itself (reads another key's
// Remaining: n = 0 creates nothing). Nothing in the docs forbids it; it
// must not deadlock. (Doubtful as a promise: reentrancy is not documented
// either way.)
func TestKeyLimitReentrant(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			var e atomic.Pointer[engine.Engine]
			eng := newEngineNoCloseCheck(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: alg, DisableEviction: true, Shards: 1, KeyLimit: func(key string) int64 {
				if len(key) > 0 && key[0] == 'k' {
					e.Load().AllowAt("base"+key, 1, t0)
					e.Load().AllowAt("base", 0, t0)
				}
				return 0
			}})
			e.Store(eng)
			eng.AllowAt("base", 1, t0)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < 500; i++ {
					engine.AllowAll(t0, engine.Request{Engine: eng, Key: fmt.Sprint("k", i), N: 1}, engine.Request{Engine: eng, Key: "base", N: 0})
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("deadlock: KeyLimit calling the engine")
			}
		})
	}
}
