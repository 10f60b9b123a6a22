package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// SlidingLog: a reservation made before SetLimit raised the key's limit
// (moving its log into a larger allocation), cancelled after it. A
// sequential SlidingLog key must show neither false admits nor false denies.
func TestReview4AuditLogCancelAfterSetLimitMove(t *testing.T) {
	clk := engine.NewManualClock(advT0)
	e := advNew(t, engine.Config{Limit: 2, Window: time.Second, Algorithm: engine.SlidingLog, Audit: 1, PerKeyLimits: true, DisableEviction: true, Clock: clk})
	r := e.ReserveAt("k", 1, advMs(advT0, 0))
	if !r.Decision().Allowed {
		t.Fatal("denied")
	}
	if !e.AllowAt("k", 1, advMs(advT0, 1)).Allowed {
		t.Fatal("denied")
	}
	if err := e.SetLimitAt("k", 3, advMs(advT0, 2)); err != nil {
		t.Fatal(err)
	}
	ok := r.Cancel()
	t.Logf("cancel: %v", ok)
	var ds []engine.Decision
	for i := 3; i < 7; i++ {
		ds = append(ds, e.AllowAt("k", 1, advMs(advT0, i)))
	}
	rep := e.Audit()
	t.Logf("decisions after: %+v", ds)
	t.Logf("%+v", rep)
	if rep.FalseAdmits != 0 || rep.FalseDenies != 0 {
		t.Errorf("SlidingLog, sequential: FalseAdmits=%d FalseDenies=%d, want 0 and 0 (%+v)", rep.FalseAdmits, rep.FalseDenies, rep)
	}
}
