package engine_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// The key table grows from nothing to many keys (slab generation after
// generation), every key keeps its own count across the generations, a
// sweep takes them all back (the slab shrinks), and recreated keys start
// from zero, while one key that stayed active through it all, in a slab
// generations old, keeps its count until it is Reset.
func TestSlabGrowthAndSweepBack(t *testing.T) {
	keys := 1 << 13
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) { slabGrowth(t, alg, keys) })
	}
}

func slabGrowth(t *testing.T, alg engine.Algorithm, keys int) {
	const window = 100 * time.Millisecond
	t0 := time.Unix(1_700_000_000, 0)
	clk := engine.NewManualClock(t0)
	e, err := engine.New(engine.Config{Limit: 2, Window: window, Algorithm: alg, Clock: clk, DisableEviction: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	key := func(gen, i int) string { return fmt.Sprintf("%c%07d", 'a'+gen, i) } // 8 bytes
	mustAllow := func(k string, at time.Time, rem int64, where string) {
		t.Helper()
		if d := e.AllowAt(k, 1, at); !d.Allowed || d.Remaining != rem {
			t.Fatalf("%s: key %q: %+v, want allowed with %d remaining", where, k, d, rem)
		}
	}
	mustDeny := func(k string, at time.Time, where string) {
		t.Helper()
		if d := e.AllowAt(k, 1, at); d.Allowed {
			t.Fatalf("%s: key %q admitted a unit past its limit: %+v", where, k, d)
		}
	}
	mustAllow("keep", t0, 1, "keep")
	mustAllow("keep", t0, 0, "keep")
	for i := range keys {
		mustAllow(key(0, i), t0, 1, "growth")
		if i%4096 == 0 { // the old key is found through every generation
			mustDeny("keep", t0, "growth "+strconv.Itoa(i))
		}
	}
	if got := e.Len(); got != int64(keys)+1 {
		t.Fatalf("Len %d after growth, want %d", got, keys+1)
	}
	for i := range keys {
		mustAllow(key(0, i), t0, 0, "second unit")
		mustDeny(key(0, i), t0, "third unit")
	}
	// Every key but keep goes idle and is swept; keep stays active.
	later := t0.Add(4 * window)
	clk.Set(later)
	mustAllow("keep", later, 1, "keep, active again") // its units of t0 have left the window
	mustAllow("keep", later, 0, "keep, active again")
	if got := e.Sweep(); got != keys {
		t.Fatalf("Sweep reclaimed %d keys, want %d", got, keys)
	}
	if got := e.Len(); got != 1 {
		t.Fatalf("Len %d after the sweep, want 1 (keep)", got)
	}
	for i := 0; i < keys; i += 7 {
		mustAllow(key(0, i), later, 1, "recreated")
	}
	for i := range keys / 2 {
		mustAllow(key(1, i), later, 1, "new generation")
	}
	for i := 0; i < keys; i += 7 {
		mustAllow(key(0, i), later, 0, "recreated, second unit")
		mustDeny(key(0, i), later, "recreated, third unit")
	}
	mustDeny("keep", later, "keep through the sweep and a new slab")
	if !e.Reset("keep") {
		t.Fatal("Reset(keep) found no state")
	}
	mustAllow("keep", later, 1, "keep after Reset")
}
