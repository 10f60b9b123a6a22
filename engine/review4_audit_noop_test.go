package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A Cancel that gives nothing back "changes nothing" (README: "one that
// gives nothing back changes nothing"; AuditReport: Unadmits and
// UnadmitMissed count cancelled reservations whose units the engine gave
// back). FixedWindow: the reservation's window has passed for the key, so
// Cancel returns false; the key's next decision comes at various offsets.
func TestReview4AuditNoopCancelFixed(t *testing.T) {
	for _, nextMs := range []int{1200, 1499, 1500, 1501, 1700, 1999, 2600} {
		t.Run(fmt.Sprint(nextMs), func(t *testing.T) {
			clk := engine.NewManualClock(advT0)
			e := advNew(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: engine.FixedWindow, Audit: 1, DisableEviction: true, Clock: clk})
			r := e.ReserveAt("k", 2, advMs(advT0, 500))
			if !r.Decision().Allowed {
				t.Fatal("denied")
			}
			e.AllowAt("k", 1, advMs(advT0, nextMs))
			clk.Set(advMs(advT0, nextMs))
			if r.Cancel() {
				t.Fatal("Cancel gave units back after the key's window moved on")
			}
			rep := e.Audit()
			advConsistent(t, rep)
			if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
				t.Errorf("a Cancel that gave nothing back is counted: Unadmits=%d UnadmitMissed=%d (%+v)", rep.Unadmits, rep.UnadmitMissed, rep)
			}
		})
	}
}

// As above, with two reservations clamped to the same window start, one
// cancelled (gave back) while the window was the key's, the other after
// the key moved on (gives nothing back).
func TestReview4AuditNoopCancelFixedTwo(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, nextMs := range []int{2050, 2300, 2600} {
			t.Run(fmt.Sprint(alg, "/", nextMs), func(t *testing.T) {
				clk := engine.NewManualClock(advT0)
				e := advNew(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 1, Algorithm: alg, Audit: 1, DisableEviction: true, Clock: clk})
				e.AllowAt("a", 1, advMs(advT0, 1500))
				r1 := e.ReserveAt("a", 2, advMs(advT0, 900))
				r2 := e.ReserveAt("a", 1, advMs(advT0, 900))
				if !r1.Cancel() {
					t.Fatal("r1 gave nothing back")
				}
				e.AllowAt("a", 1, advMs(advT0, nextMs))
				clk.Set(advMs(advT0, nextMs))
				ok := r2.Cancel()
				rep := e.Audit()
				t.Logf("r1 at %v, r2 at %v, r2.Cancel=%v: %+v", r1.At().Sub(advT0), r2.At().Sub(advT0), ok, rep)
				if !ok && (rep.Unadmits != 1 || rep.UnadmitMissed != 0) {
					t.Errorf("a Cancel that gave nothing back is counted: Unadmits=%d UnadmitMissed=%d, want 1 and 0", rep.Unadmits, rep.UnadmitMissed)
				}
			})
		}
	}
}
