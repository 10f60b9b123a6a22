package engine_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Sweep: "kept while idle for [Window plus one sub-window] or less, with
// its counts"; Cancel: "An idle key's last sub-window stays cancellable
// until the key is reclaimed." A reservation in the middle of a sub-window,
// a Sweep exactly W+w (Fixed: 2W; Log: W) after it: the key is kept, and
// Cancel returns the units.
func TestIdleKeptThenCancel(t *testing.T) {
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
			at := t0.Add(off)
			clk := engine.NewManualClock(at)
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 3, Window: W, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour})
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

// Reservations on keys that were reclaimed; then new keys at the same
// instants (AllowAt's own timeline). Cancel of the old reservations must
// not touch the new keys' units (state memory reused for another key).
func TestCancelAfterReclaimNoCrossKey(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		clk := engine.NewManualClock(t0)
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour})
		const K = 2000
		rs := make([]engine.Reservation, K)
		for i := range rs {
			rs[i] = e.ReserveAt(fmt.Sprintf("a%04d", i), 3, t0)
		}
		clk.Set(t0.Add(time.Hour))
		if n := e.Sweep(); n != K {
			t.Fatalf("swept %d", n)
		}
		runtime.GC()
		for i := 0; i < K; i++ {
			if !e.AllowAt(fmt.Sprintf("b%04d", i), 5, t0).Allowed {
				t.Fatal("b denied")
			}
			if !e.AllowAt(fmt.Sprintf("a%04d", i), 5, t0).Allowed {
				t.Fatal("a denied")
			}
		}
		for i := range rs {
			if rs[i].Cancel() {
				t.Errorf("%v: Cancel of a reclaimed key's reservation returned true", alg)
				break
			}
		}
		for i := 0; i < K; i++ {
			for _, k := range []string{"a", "b"} {
				if rem := e.AllowAt(fmt.Sprintf("%s%04d", k, i), 0, t0).Remaining; rem != 0 {
					t.Fatalf("%v: key %s%04d remaining %d after old cancels", alg, k, i, rem)
				}
			}
		}
	}
}
