package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Sweep: "kept while idle for [Window plus one sub-window] or less, with
// its counts"; Cancel: "An idle key's last sub-window stays cancellable
// until the key is reclaimed." A reservation in the middle of a sub-window,
// a Sweep exactly W+w (Fixed: 2W; Log: W) after it: the key is kept, and
// Cancel returns the units.
func TestReview4IdleKeptThenCancel(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, off := range []time.Duration{0, 1, 100 * time.Millisecond, 249 * time.Millisecond} {
			W, w := time.Second, 250*time.Millisecond
			keep := W + w
			switch alg {
			case engine.FixedWindow:
				keep = 2 * W
			case engine.SlidingLog:
				keep = W
			}
			at := t13.Add(off)
			clk := engine.NewManualClock(at)
			e := new13(t, engine.Config{Limit: 3, Window: W, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour})
			r := e.Reserve("k", 2)
			if !r.Decision().Allowed {
				t.Fatal("denied")
			}
			clk.Set(at.Add(keep))
			if n := e.Sweep(); n != 0 {
				t.Errorf("%v off=%v: key reclaimed after being idle for exactly %v", alg, off, keep)
				continue
			}
			if !r.Cancel() {
				t.Errorf("%v off=%v: Cancel false on a kept idle key", alg, off)
			}
			clk.Set(at.Add(keep + W))
			if n := e.Sweep(); n != 1 {
				t.Errorf("%v off=%v: not reclaimed after %v idle: %d", alg, off, keep+W, n)
			}
		}
	}
}
