package engine

import (
	"testing"
	"time"
)

// Forced hash collisions: keys in the fallback map. Cancel (including a
// SlidingLog Cancel following a grown log) must act on its own key only,
// also after the primary resident was reclaimed.
func TestReview4CollisionsCancel(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	W := time.Second
	for _, alg := range []Algorithm{SlidingWindow, SlidingWindowStrict, FixedWindow, SlidingLog} {
		clk := NewManualClock(t0)
		e, err := New(Config{Limit: 4, Window: W, SubWindows: 4, Algorithm: alg, Clock: clk, PerKeyLimits: true, SweepInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		e.tab.ForceHashMask(0)
		ra := e.ReserveAt("a", 2, t0)
		late := t0.Add(3 * W)
		clk.Set(late)
		rb := e.ReserveAt("b", 3, late)
		rc := e.ReserveAt("c", 1, late)
		if !ra.Decision().Allowed || !rb.Decision().Allowed || !rc.Decision().Allowed {
			t.Fatal("denied")
		}
		if alg == SlidingLog {
			if err := e.SetLimitAt("b", 40, late); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.Sweep(); n != 1 {
			t.Fatalf("%v: swept %d, want a only", alg, n)
		}
		if ra.Cancel() {
			t.Errorf("%v: cancel of reclaimed a true", alg)
		}
		if !rb.Cancel() {
			t.Errorf("%v: cancel of b (fallback map, primary reclaimed) false", alg)
		}
		wantB := int64(4)
		if alg == SlidingLog {
			wantB = 40
		}
		if rem := e.AllowAt("b", 0, late).Remaining; rem != wantB {
			t.Errorf("%v: b remaining %d want %d", alg, rem, wantB)
		}
		if rem := e.AllowAt("c", 0, late).Remaining; rem != 3 {
			t.Errorf("%v: c remaining %d want 3", alg, rem)
		}
		if !rc.Cancel() {
			t.Errorf("%v: cancel c false", alg)
		}
		if rem := e.AllowAt("c", 0, late).Remaining; rem != 4 {
			t.Errorf("%v: c remaining %d want 4", alg, rem)
		}
		// new a at late, then a reservation cancelled
		r2 := e.ReserveAt("a", 4, late)
		if !r2.Cancel() || e.AllowAt("a", 0, late).Remaining != 4 {
			t.Errorf("%v: new a", alg)
		}
		e.Close()
	}
}

func TestReview4CollisionsLogGrowCancelStorm(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for round := 0; round < 20; round++ {
		e, err := New(Config{Limit: 4, Window: time.Hour, Algorithm: SlidingLog, PerKeyLimits: true, DisableEviction: true, MaxLogLimit: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		e.tab.ForceHashMask(0)
		keys := []string{"a", "b", "c"}
		done := make(chan struct{})
		lims := make([]int64, len(keys))
		kept := make([]int64, len(keys))
		var wgs [3]chan struct{}
		for i := range keys {
			wgs[i] = make(chan struct{})
			go func(i int) {
				defer close(wgs[i])
				for l := int64(8); l <= 2048; l *= 2 {
					if err := e.SetLimitAt(keys[i], l, t0); err != nil {
						t.Error(err)
					}
					lims[i] = l
				}
			}(i)
		}
		var ws [3]chan struct{}
		for i := range keys {
			ws[i] = make(chan struct{})
			go func(i int) {
				defer close(ws[i])
				for j := 0; j < 400; j++ {
					r := e.ReserveAt(keys[i], 1, t0)
					if r.Units() > 0 && !r.Cancel() {
						kept[i]++
					}
				}
			}(i)
		}
		for i := range keys {
			<-wgs[i]
			<-ws[i]
		}
		close(done)
		for i, k := range keys {
			rem := e.AllowAt(k, 0, t0).Remaining
			if lims[i]-rem != kept[i] || kept[i] != 0 {
				t.Fatalf("round %d key %s: holds %d, cancel false %d", round, k, lims[i]-rem, kept[i])
			}
		}
		e.Close()
	}
}
