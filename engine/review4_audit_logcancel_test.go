package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// SlidingLog, one key, sequential: reserve 4 of 5; SetLimitAt (optionally
// behind the key's time, optionally raising the limit so the log moves);
// a denial; then Cancel. The denial came before the cancel, so it must be
// judged with the 4 units in the log (README: "A sequential caller's
// decisions between the reservation and the cancel are all replayed
// before it").
func TestReview4AuditLogCancelAfterBackdatedSetLimit(t *testing.T) {
	cases := []struct {
		name    string
		setAt   time.Duration // from the reservation
		setTo   int64
		skipSet bool
	}{
		{"no setlimit", 0, 0, true},
		{"raise, forward", 10 * time.Millisecond, 6, false},
		{"same, backdated", -300 * time.Millisecond, 5, false},
		{"raise, backdated", -300 * time.Millisecond, 6, false},
		{"raise, backdated 1ns", -1, 6, false},
		{"lower, backdated", -300 * time.Millisecond, 4, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := advMs(advT0, 500)
			clk := engine.NewManualClock(base)
			e := advNew(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: engine.SlidingLog, Audit: 1, PerKeyLimits: true, DisableEviction: true, Clock: clk})
			r := e.ReserveAt("b", 4, base)
			if !r.Decision().Allowed {
				t.Fatal("denied")
			}
			if !c.skipSet {
				if err := e.SetLimitAt("b", c.setTo, base.Add(c.setAt)); err != nil {
					t.Fatal(err)
				}
			}
			d := e.AllowAt("b", 3, advMs(base, 80))
			if d.Allowed {
				t.Fatalf("admitted: %+v", d)
			}
			clk.Set(advMs(base, 150))
			if !r.Cancel() {
				t.Fatal("cancel gave nothing back")
			}
			rep := e.Audit()
			t.Logf("%+v", rep)
			if rep.FalseDenies != 0 || rep.FalseAdmits != 0 {
				t.Errorf("sequential SlidingLog key: FalseDenies=%d FalseAdmits=%d, want 0 (the denial of 3 with 4 of %d units held is right)", rep.FalseDenies, rep.FalseAdmits, d.Limit)
			}
		})
	}
}

// The same on the engine's clock, with UpdateLimits raising every key's
// limit (the log moves into a larger allocation), as a service applying a
// new policy would.
func TestReview4AuditLogCancelAfterUpdateLimits(t *testing.T) {
	clk := engine.NewManualClock(advT0)
	e := advNew(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: engine.SlidingLog, Audit: 1, PerKeyLimits: true, Clock: clk})
	r := e.Reserve("tenant", 4)
	if !r.Decision().Allowed {
		t.Fatal("denied")
	}
	clk.Advance(10 * time.Millisecond)
	if err := e.UpdateLimits(func(string, int64) int64 { return 6 }); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Millisecond)
	if d := e.AllowN("tenant", 3); d.Allowed {
		t.Fatalf("admitted %+v", d)
	}
	clk.Advance(10 * time.Millisecond)
	if !r.Cancel() {
		t.Fatal("cancel gave nothing back")
	}
	rep := e.Audit()
	t.Logf("%+v", rep)
	if rep.FalseDenies != 0 {
		t.Errorf("SlidingLog on one goroutine: FalseDenies = %d, want 0 (4 held + 3 > 6: the denial was right)", rep.FalseDenies)
	}
}
