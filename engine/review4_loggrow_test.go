package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Log grown by SetLimit (old ring retired by Grow), then the key reclaimed
// and recreated, with the clock put back and a new reservation at the very
// same instant. The old reservation's Cancel must not remove the new
// state's units.
func TestReview4LogGrowReclaimRecreateSameInstant(t *testing.T) {
	for _, back := range []bool{false, true} {
		clk := engine.NewManualClock(t13)
		W := time.Second
		e := new13(t, engine.Config{Limit: 2, Window: W, Algorithm: engine.SlidingLog, Clock: clk, PerKeyLimits: true, SweepInterval: time.Hour})
		r := e.ReserveAt("k", 2, t13)
		if err := e.SetLimitAt("k", 40, t13); err != nil {
			t.Fatal(err)
		}
		clk.Set(t13.Add(5 * W))
		if n := e.Sweep(); n != 1 {
			t.Fatalf("swept %d", n)
		}
		if back {
			clk.Set(t13)
		}
		r2 := e.ReserveAt("k", 2, t13)
		if !r2.Decision().Allowed {
			t.Fatal("denied")
		}
		got := r.Cancel()
		rem := e.AllowAt("k", 0, r2.At()).Remaining
		t.Logf("back=%v: new at %v, old Cancel=%v, remaining %d", back, r2.At().Sub(t13), got, rem)
		if got || rem != 0 {
			t.Errorf("back=%v: old reservation's Cancel after reclamation returned %v, new key remaining %d (want false, 0)", back, got, rem)
		}
	}
}

// As above, but the key's new state is created by SetLimitAt at the old
// instant (SetLimitAt creates a key's state "at now if it has none").
func TestReview4LogGrowReclaimSetLimitRecreate(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		for _, back := range []bool{false, true} {
			clk := engine.NewManualClock(t13)
			W := time.Second
			e := new13(t, engine.Config{Limit: 2, Window: W, SubWindows: 4, Algorithm: alg, Clock: clk, PerKeyLimits: true, SweepInterval: time.Hour})
			r := e.ReserveAt("k", 2, t13)
			if err := e.SetLimitAt("k", 40, t13); err != nil {
				t.Fatal(err)
			}
			clk.Set(t13.Add(5 * W))
			if n := e.Sweep(); n != 1 {
				t.Fatalf("swept %d", n)
			}
			if back {
				clk.Set(t13)
			}
			if err := e.SetLimitAt("k", 40, t13); err != nil {
				t.Fatal(err)
			}
			r2 := e.ReserveAt("k", 2, t13)
			if !r2.Decision().Allowed {
				t.Fatal("denied")
			}
			got := r.Cancel()
			rem := e.AllowAt("k", 0, r2.At()).Remaining
			t.Logf("%v back=%v: new at %v, old Cancel=%v, remaining %d", alg, back, r2.At().Sub(t13), got, rem)
			if got || rem != 38 {
				t.Errorf("%v back=%v: old reservation's Cancel after reclamation returned %v, new key remaining %d (want false, 38)", alg, back, got, rem)
			}
		}
	}
}
