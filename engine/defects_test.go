package engine_test

// Regression tests for the defects an adversarial review found in the first
// engine (one test per defect, named after it). Each failed on that engine.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// Two sweeps of one table at once (a caller's Sweep beside another, or
// beside the background sweeper) must neither store an empty state for a
// key that the other sweep deleted nor crash a later decision.
func TestDefectConcurrentSweepsKeepTheTableSound(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0)
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: alg, Clock: clk, DisableEviction: true, Shards: 4})
			const keys = 20_000
			for i := range keys {
				require.True(t, e.Allow(fmt.Sprint("k", i)))
			}
			clk.Advance(10 * time.Second)
			var wg sync.WaitGroup
			var swept [2]int
			for g := range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); swept[g] = e.Sweep() }()
			}
			wg.Wait()
			require.Equal(t, keys, swept[0]+swept[1], "every key reclaimed exactly once")
			require.Zero(t, e.Len())
			require.Zero(t, e.Sweep(), "nothing left to reclaim, and no empty state stored")
			for i := range keys {
				k := fmt.Sprint("k", i)
				d, panicked := allowNoPanic(e, k)
				require.False(t, panicked, "AllowN(%q) panicked", k)
				require.True(t, d.Allowed, k)
				require.Equal(t, int64(4), d.Remaining, k)
			}
			require.Equal(t, int64(keys), e.Len())
		})
	}
}

func allowNoPanic(e *engine.Engine, key string) (d engine.Decision, panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	return e.AllowN(key, 1), false
}
