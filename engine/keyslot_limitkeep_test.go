package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A SetLimit override survives Reset after Reset (the key's new ring in
// the other slot of the home slab, then on the heap) with the count
// starting from zero each time, and is forgotten only when the key is
// reclaimed: then KeyLimit's answer applies again.
func TestResetKeepsTheOverrideInEverySlot(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, n := range []int{1, 7, 8, 9, 15, 16, 64, 100} {
			key := strings.Repeat("o", n)
			t0 := time.Unix(1_700_000_000, 0)
			clk := engine.NewManualClock(t0)
			e, err := engine.New(engine.Config{Limit: 4, Window: time.Second, Algorithm: alg, Clock: clk, SweepInterval: time.Hour,
				KeyLimit: func(string) int64 { return 3 }})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.SetLimitAt(key, 7, t0); err != nil {
				t.Fatal(err)
			}
			now := t0
			for round := range 5 {
				if d := e.AllowAt(key, 7, now); !d.Allowed || d.Limit != 7 {
					t.Fatalf("%s len %d round %d: %+v, want the override's 7 units admitted", alg, n, round, d)
				}
				if !e.Reset(key) {
					t.Fatalf("%s len %d round %d: Reset found no state", alg, n, round)
				}
				now = now.Add(time.Millisecond)
			}
			now = now.Add(time.Minute)
			clk.Set(now)
			if got := e.Sweep(); got != 1 {
				t.Fatalf("%s len %d: Sweep reclaimed %d, want 1", alg, n, got)
			}
			if d := e.AllowAt(key, 1, now); !d.Allowed || d.Limit != 3 || d.Remaining != 2 {
				t.Fatalf("%s len %d: after reclamation %+v, want KeyLimit's 3 and 2 remaining", alg, n, d)
			}
			e.Close()
		}
	}
}
