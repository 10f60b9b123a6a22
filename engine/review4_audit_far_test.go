package engine_test

import (
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Sequential SlidingLog / Strict keys near the end of time: every decision
// should be judged and none false.
func TestReview4AuditFarIdleAndCaps(t *testing.T) {
	end := time.Unix(0, math.MaxInt64)
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindowStrict, engine.SlidingWindow} {
		for _, w := range []time.Duration{time.Second, time.Hour, 24 * time.Hour, 1 << 58} {
			for _, frac := range []int64{2, 3, 1} {
				t.Run(alg.String()+"/"+w.String(), func(t *testing.T) {
					base := end.Add(-w / time.Duration(frac*2)).Truncate(time.Millisecond)
					if frac == 1 {
						base = end.Add(-time.Duration(float64(w) * 1.5)).Truncate(time.Millisecond)
					}
					e := advNew(t, engine.Config{Limit: 5, Window: w, SubWindows: 4, Algorithm: alg, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
					for i := range 5 {
						if !e.AllowAt("a", 1, advMs(base, i)).Allowed {
							t.Fatalf("denied at %d", i)
						}
					}
					r0 := e.Audit()
					if d := e.AllowAt("a", 1, advMs(base, 10)); d.Allowed {
						t.Fatalf("admitted 6th")
					}
					r1 := e.Audit()
					t.Logf("%+v\n%+v", r0, r1)
					advConsistent(t, r1)
					if r1.Unjudged != 0 || r1.FalseDenies != 0 || r1.FalseAdmits != 0 {
						t.Errorf("sequential key near 2262: %+v", r1)
					}
					// b is refused a log by the cap (AuditMaxKeys 1): its units are unlogged.
					for i := range 5 {
						e.AllowAt("b", 1, advMs(base, 20+i))
					}
					// b again, still inside the window of its unlogged units
					e.AllowAt("b", 1, advMs(base, 30))
					r2 := e.Audit()
					t.Logf("%+v", r2)
					if r2.FalseDenies != r1.FalseDenies || r2.FalseAdmits != 0 {
						t.Errorf("b judged on an incomplete log: %+v", r2)
					}
				})
			}
		}
	}
}

// At the Unix epoch itself: a drop at t = 0 must quarantine [0, W).
func TestReview4AuditDropAtEpochZero(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			zero := time.Unix(0, 0)
			e := advNew(t, engine.Config{Limit: 1000, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
			e.Close()
			for i := 0; i < 56; i++ { // decisions fill 7/8 of the buffer; the rest is Cancel's
				e.AllowAt("k", 1, zero)
			}
			if !e.AllowAt("k", 900, zero).Allowed { // dropped
				t.Fatal("denied")
			}
			r := e.Audit()
			if r.Dropped != 1 {
				t.Fatalf("%+v", r)
			}
			for i := 1; i <= 10; i++ {
				e.AllowAt("k", 10, advMs(zero, i*10))
			}
			r = e.Audit()
			t.Logf("%+v", r)
			if r.Judged != 0 && (r.FalseDenies != 0 || r.Judged > 56) {
				t.Errorf("judged inside the window of a drop at t=0: %+v", r)
			}
		})
	}
}
