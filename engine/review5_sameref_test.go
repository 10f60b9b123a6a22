package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Two reservations made with the same request time 0.1 s, the second one
// after the key moved on to 0.6 s, so the engine records it at 0.6 s.
// Cancelling the first must take out the unit at 0.1 s; if the audit takes
// it from the newest entry "of that ref" (the one at 0.6 s) instead, its
// log holds a unit at 0.1 s (gone at 1.1 s) instead of at 0.6 s, and at
// 1.15 s it sees room the engine rightly does not have: a false deny for
// SlidingLog, which "makes neither on a key whose decisions are not
// concurrent". All sequential.
func TestReview5AuditSameRequestTimeCancel(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 3, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, DisableEviction: true}
			e := advNew(t, cfg)
			ref := newAuditRef(cfg, e.Width())
			at := func(ms int) time.Time { return advMs(advT0, ms) }
			step := func(n int64, ms int) engine.Decision {
				d := e.AllowAt("k", n, at(ms))
				ref.observe("k", n, at(ms), d)
				return d
			}
			a, b := 100, 600
			probes := []int{1150, 1300, 1450, 1599}
			if alg == engine.SlidingWindow || alg == engine.SlidingWindowStrict {
				// both in one sub-window [0.6, 0.7)
				a, b = 610, 690
				probes = []int{1620, 1650, 1680, 1689}
			}
			r1 := e.ReserveAt("k", 1, at(a))
			ref.observe("k", 1, at(a), r1.Decision())
			step(1, b)
			r2 := e.ReserveAt("k", 1, at(a))
			ref.observe("k", 1, at(a), r2.Decision())
			if !r1.Decision().Allowed || !r2.Decision().Allowed {
				t.Fatalf("setup %+v %+v", r1.Decision(), r2.Decision())
			}
			t.Logf("r1 at %v, r2 at %v", r1.At().Sub(advT0), r2.At().Sub(advT0))
			if !r1.Cancel() {
				t.Fatal("cancel")
			}
			k := ref.keys["k"]
			ref.rep.Unadmits++
			k.log[0].n-- // r1's own unit, at 0.1 s
			var ds []string
			for i, ms := range probes {
				d := step(int64(1+i%2), ms)
				ds = append(ds, fmt.Sprintf("%dms:%v", ms, d.Allowed))
			}
			got := e.Audit()
			t.Logf("decisions %v\n got  %+v\n want %+v", ds, got, ref.rep)
			if alg == engine.SlidingLog && (got.FalseDenies != 0 || got.FalseAdmits != 0) {
				t.Errorf("SlidingLog, sequential: %d false denies, %d false admits", got.FalseDenies, got.FalseAdmits)
			}
			if got.FalseDenies != ref.rep.FalseDenies || got.FalseAdmits != ref.rep.FalseAdmits || got.WorstWindow != ref.rep.WorstWindow {
				t.Errorf("report differs from the exact log: got %d/%d false admits/denies, worst %v; want %d/%d, worst %v",
					got.FalseAdmits, got.FalseDenies, got.WorstWindow, ref.rep.FalseAdmits, ref.rep.FalseDenies, ref.rep.WorstWindow)
			}
		})
	}
}
