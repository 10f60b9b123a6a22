package engine_test

// Tests written by an adversarial review of the engine that had only the
// public API and the documented promises: ADV-n tests reproduce the defects
// it found (each failed before its fix), "Held" tests the attacks that did
// not break it.

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// Held: MaxKeys under concurrent creation, Sweep loops, the background
// sweeper and SetLimit; Len never above the cap; at quiescence Len equals
// the keys Range visits.
func TestAdvMaxKeysUnderChurn(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			const cap = 8
			clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
			e := newEngine(t, engine.Config{Limit: 3, Window: 10 * time.Millisecond, SubWindows: 2, Algorithm: alg, Clock: clk, MaxKeys: cap, PerKeyLimits: true, SweepInterval: time.Millisecond, Shards: 2})
			var stop atomic.Bool
			var wg sync.WaitGroup
			var over atomic.Int64
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for i := 0; i < 20000; i++ {
						k := fmt.Sprint("k", rng.IntN(40))
						switch rng.IntN(10) {
						case 0:
							clk.Advance(time.Duration(rng.Int64N(int64(15 * time.Millisecond))))
						case 1:
							e.Sweep()
						case 2:
							_ = e.SetLimit(k, 1+rng.Int64N(4))
						default:
							d := e.AllowN(k, 1)
							if !d.Allowed && d.Reason() == engine.ReasonKeysFull && d.Remaining != d.Limit {
								over.Add(1)
							}
						}
						if l := e.Len(); l > cap || l < 0 {
							over.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			stop.Store(true)
			require.Zero(t, over.Load())
			// Quiescent: stop the background sweeper too, or it may reclaim
			// keys between the count and Len.
			require.NoError(t, e.Close())
			n := int64(0)
			require.NoError(t, e.UpdateLimits(func(string, int64) int64 { n++; return 0 }))
			require.Equal(t, n, e.Len(), "Len vs keys held")
			clk.Advance(time.Hour)
			e.Sweep()
			require.Zero(t, e.Len())
		})
	}
}

// Held: no allocation on the hot path for existing keys, every algorithm,
// per-key limits, denials with detail, a 1 MiB key.
func TestAdvHotPathAllocs(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		e := newEngine(t, engine.Config{Limit: 2, Window: time.Second, Algorithm: alg, PerKeyLimits: true, DisableEviction: true, MaxKeyBytes: engine.MaxKeyBytesCeiling})
		at := time.Unix(1_700_000_000, 0)
		e.AllowAt("k", 1, at)
		e.AllowAt(big, 1, at)
		i := 0
		a := testing.AllocsPerRun(1000, func() {
			i++
			e.AllowAt("k", 1, at.Add(time.Duration(i)*time.Millisecond))
			e.AllowAt(big, 2, at.Add(time.Duration(i)*time.Millisecond))
			e.AllowN("k", 0)
			e.Allow("k")
			e.AllowAt("k", 5, at) // n > limit on an existing key
		})
		require.Zero(t, a, alg.String())
	}
}

// Held: bad configurations error (naming the field), never panic.
func TestAdvBadConfigNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	vals := []int64{-1, 0, 1, 2, 7, 1000, 1001, 1 << 20, 1<<20 + 1, engine.MaxLimit, engine.MaxLimit + 1, int64(engine.MaxWindow), int64(engine.MaxWindow) + 1, 1<<63 - 1, -1 << 63}
	pick := func() int64 { return vals[rng.IntN(len(vals))] }
	for i := 0; i < 20000; i++ {
		cfg := engine.Config{
			Limit: pick(), Window: time.Duration(pick()), SubWindows: int(pick()), Algorithm: engine.Algorithm(rng.IntN(6) - 1),
			MaxLogLimit: pick(), Shards: int(pick()), MaxKeys: pick(), SweepInterval: time.Duration(pick()),
			DisableEviction: true,
		}
		if rng.IntN(4) == 0 {
			cfg.CoarseClock = time.Duration(pick())
			cfg.DisableEviction = false
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("New(%+v) panicked: %v", cfg, r)
				}
			}()
			e, err := engine.New(cfg)
			if err != nil {
				require.Contains(t, err.Error(), "Config.")
				return
			}
			if cfg.Algorithm != engine.SlidingLog {
				d := e.AllowAt("k", 1, time.Unix(0, 1<<62))
				require.True(t, d.Allowed || d.Limit < 1, "%+v %+v", cfg, d)
				_ = e.AllowAt("k", cfg.Limit, time.Unix(0, 1<<62+1))
				_ = e.AllowAt("k", 1, time.Unix(0, 1<<63-1))
			}
			e.Close()
		}()
	}
}
