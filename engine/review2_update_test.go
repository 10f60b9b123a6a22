package engine_test

// Adversarial review 2: UpdateLimits racing the sweeper.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// ADV2-2. UpdateLimits is documented as never creating a key: "a key
// reclaimed meanwhile is not created again". But setLimit(create=false)
// treats a ring it finds retired like SetLimit does: Table.Replace (counter
// rings) or Grow inside Swap (a log needing a larger ring) installs a fresh
// ring. When the ring was retired by a sweep that has not yet deleted it,
// the sweep's delete then finds another ring and keeps it; when the sweep
// deleted it between UpdateLimits' Load and its Replace, Replace creates the
// absent key outright. Either way an idle key that the sweep reclaimed is
// back in the table (holding a MaxKeys slot, its KeyLimit bypassed).
func TestAdv2UpdateLimitsRecreatesKeysTheSweepReclaims(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			const keys = 3000
			recreated, rounds := int64(0), 0
			for round := 0; round < 20 && recreated == 0; round++ {
				rounds++
				t0 := time.Unix(1_700_000_000, 0)
				clk := engine.NewManualClock(t0)
				e, err := engine.New(engine.Config{Limit: 4, Window: time.Second, SubWindows: 10, Algorithm: alg,
					Clock: clk, PerKeyLimits: true, MaxLogLimit: 64, Shards: 1, SweepInterval: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < keys; i++ {
					e.Allow(fmt.Sprint("k", i))
				}
				clk.Advance(time.Minute) // every key idle for a minute
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); e.Sweep() }()
				go func() {
					defer wg.Done()
					_ = e.UpdateLimits(func(_ string, cur int64) int64 { return cur + 10 }) // the log grows
				}()
				wg.Wait()
				e.Sweep() // nothing idle is left behind by the first sweep's race...
				// ...but a key UpdateLimits re-created at the clock is live now.
				recreated = e.Len()
				e.Close()
			}
			if recreated > 0 {
				t.Errorf("after %d round(s): %d idle key(s) reclaimed by Sweep were created again by UpdateLimits (Len = %d, want 0)", rounds, recreated, recreated)
			}
		})
	}
}

// ADV2-5 (low). "A key created meanwhile gets its limit from KeyLimit
// instead": a key reclaimed and created again between UpdateLimits' visit
// (fn sees the old state's limit) and its store gets fn's result, computed
// from the old state, instead of KeyLimit's. Deterministic: fn itself is
// the "meanwhile".
func TestAdv2UpdateLimitsAppliesToAKeyCreatedMeanwhile(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 10, Clock: clk, SweepInterval: time.Hour,
		KeyLimit: func(string) int64 { return 7 }})
	if err := e.SetLimit("k", 50); err != nil {
		t.Fatal(err)
	}
	err := e.UpdateLimits(func(key string, cur int64) int64 {
		// meanwhile: "k" goes idle, is reclaimed, and is created anew
		clk.Advance(time.Minute)
		if n := e.Sweep(); n != 1 {
			t.Fatalf("sweep reclaimed %d", n)
		}
		if !e.Allow("k") {
			t.Fatal("new k")
		}
		return cur * 2 // policy: double whatever it had (50 → 100)
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := e.AllowAt("k", 0, time.Unix(0, clk.UnixNano())); d.Limit != 7 {
		t.Errorf("the key created meanwhile has limit %d, want KeyLimit's 7 (fn's result from the reclaimed state's 50)", d.Limit)
	}
}
