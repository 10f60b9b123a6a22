package engine_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Config.ExpectedKeys changes no decision under the clock's extremes and
// the table's: tiny expected counts (1, 7), MaxKeys equal to ExpectedKeys, KeyLimit,
// keys of every length with binary bytes, forward jumps of more than 2^21
// sub-windows, calls back in time within and across sub-windows, and
// sweeps that empty the table and refill it many times. An engine with it
// and one without answer alike through the same sequence, and hold and
// reclaim and refuse as many keys.
func TestExpectedKeysModelExtremes(t *testing.T) {
	keys := expectedKeysMix(6)
	type variant struct {
		expect, maxKeys int64
		sub             int
		keyLimit        bool // Config.KeyLimit from the key's length
	}
	variants := []variant{{1, 0, 0, false}, {7, 0, 1, false}, {7, 7, 0, false}, {64, 64, 4, false}, {int64(len(keys)), 0, 100, false}, {5, 0, 0, true}}
	for _, alg := range expectedKeysAlgs {
		for _, v := range variants {
			t.Run(fmt.Sprintf("%v/expected=%d/max=%d/sub=%d/keylimit=%v", alg, v.expect, v.maxKeys, v.sub, v.keyLimit), func(t *testing.T) {
				clk := engine.NewManualClock(t0)
				cfg := engine.Config{Algorithm: alg, Limit: 4, Window: time.Second, SubWindows: v.sub, Shards: 2, Clock: clk, SweepInterval: 1 << 62, MaxKeys: v.maxKeys, PerKeyLimits: alg != engine.TokenBucket}
				if alg == engine.SlidingLog || alg == engine.TokenBucket {
					cfg.SubWindows = 0
				}
				if v.keyLimit && alg != engine.TokenBucket {
					cfg.KeyLimit = func(k string) int64 { return 1 + int64(len(k)%6) }
				}
				off := newEngine(t, cfg)
				cfg.ExpectedKeys = v.expect
				on := newEngine(t, cfg)
				sub := time.Second / 10
				if cfg.SubWindows > 0 {
					sub = time.Second / time.Duration(cfg.SubWindows)
				}
				rng := rand.New(rand.NewPCG(uint64(alg), uint64(v.expect*1000+v.maxKeys)))
				now, swept := t0, t0
				for step := range scaled(4_000, 12_000) {
					switch j := rng.IntN(1000); {
					case j < 2: // more than 2^21 sub-windows ahead
						now = now.Add(sub * (1<<21 + time.Duration(rng.IntN(1<<20))))
					case j < 20: // idle: a sweep empties the table
						now = now.Add(3 * time.Second)
					default:
						now = now.Add(time.Duration(rng.IntN(int(sub / 4))))
					}
					clk.Set(now)
					if step%500 == 0 || rng.IntN(100) == 0 {
						if a, b := on.Sweep(), off.Sweep(); a != b {
							t.Fatalf("step %d: Sweep reclaimed %d with ExpectedKeys, %d without", step, a, b)
						}
						swept = now
					}
					at := now
					if rng.IntN(4) == 0 { // back in time: within the sub-window or a few before
						// but not before the last sweep: a key revived there starts
						// at its shard's floor, which the hash seed decides.
						at = now.Add(-time.Duration(rng.Int64N(int64(3 * sub))))
						if at.Before(swept) {
							at = swept
						}
					}
					k := keys[rng.IntN(len(keys))]
					n := int64(rng.IntN(3))
					sameAnswers(t, step, on, off, rng, callMix{reset: 3, setLimit: 6, reserve: 25, maxLimit: 6}, cfg.PerKeyLimits, k, n, at)
					if a, b := on.Stats(), off.Stats(); a != b || on.Len() != off.Len() {
						t.Fatalf("step %d: Stats %+v (Len %d) with ExpectedKeys, %+v (Len %d) without", step, a, on.Len(), b, off.Len())
					}
				}
			})
		}
	}
}
