package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// The live audit and the offline audit agree "to the unit at fixed
// instants" — here for every algorithm including the log, with an odd
// sub-window width, nanosecond instants, and bursts that fill the limit.
func TestReview4LiveAuditAgreesOdd(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, sub := range []int{1, 7} {
			t.Run(fmt.Sprint(alg, "/", sub), func(t *testing.T) {
				o := options{tenants: 30, seed: 5, zipf: 1.1, liveAudit: 1, window: 999_999_997 * 7 / 7}
				if sub == 7 {
					o.window = 999_999_994
				}
				p := newPlan(o)
				e, err := engine.New(engine.Config{Limit: tierLimits[0], Window: o.window, SubWindows: sub, Algorithm: alg,
					KeyLimit: p.tier.keyLimit, Audit: o.liveAudit, DisableEviction: true})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				p.addLive(e)
				auditors := make([]*auditor, len(p.audited))
				for s, ae := range p.audited {
					auditors[s] = newAuditor(tierLimits[p.tier[ae.tenant]], int64(o.window))
				}
				t0 := time.Unix(1_700_000_000, 123_456_789)
				for step := range 600 {
					for s, ae := range p.audited {
						at := t0.Add(time.Duration(step)*13_333_337 + time.Duration(ae.tenant)*1_001)
						lim := tierLimits[p.tier[ae.tenant]]
						n := 1 + int64(step*7+ae.tenant)%5
						if step%40 < 3 {
							n = lim
						}
						d := e.AllowAt(p.keys[ae.tenant], n, at)
						auditors[s].observe(at.UnixNano(), n, d.Allowed)
					}
					if step%97 == 0 {
						e.Audit()
					}
				}
				la := liveAuditOf(o, p, auditors, e.Audit())
				t.Logf("engine %+v", la.Engine)
				if !la.Agree {
					t.Fatalf("disagree: %v\nengine  %+v\noffline %+v", la.Differences, la.Engine, la.Offline)
				}
			})
		}
	}
}
