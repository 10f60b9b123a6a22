package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Reserve 8 of 10, a denial of 5 in a later sub-window (right: 8 + 5 > 10),
// then Cancel. The denial came first, so it must be judged with the 8 units.
func TestReview4AuditDenyLaterSubWindowThenCancel(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, denyMs := range []int{100, 350, 600, 900} {
			t.Run(alg.String(), func(t *testing.T) {
				clk := engine.NewManualClock(advT0)
				e := advNew(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, DisableEviction: true, Clock: clk})
				r := e.ReserveAt("k", 8, advMs(advT0, 100))
				if d := e.AllowAt("k", 5, advMs(advT0, denyMs)); d.Allowed {
					t.Fatal("admitted")
				}
				clk.Set(advMs(advT0, denyMs+10))
				if !r.Cancel() {
					t.Fatal("cancel")
				}
				rep := e.Audit()
				if rep.FalseDenies != 0 {
					t.Errorf("deny at %d ms judged false: %+v", denyMs, rep)
				}
			})
		}
	}
}
