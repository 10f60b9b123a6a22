package main

import (
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestAuditor checks the exact log and the window maximum against
// hand-computed sequences.
func TestAuditor(t *testing.T) {
	type ev struct {
		t, n    int64
		allowed bool // the engine's decision
	}
	for _, tc := range []struct {
		name                                      string
		limit, window                             int64
		events                                    []ev
		logAllowed, falseAllows, falseDenies, max int64
		warm                                      int64
	}{
		{
			// Window (t−W, t]: the event at 0 has left it at t = 10.
			name: "agrees, half-open window", limit: 2, window: 10,
			events:     []ev{{0, 1, true}, {5, 1, true}, {9, 1, false}, {10, 1, true}, {14, 1, false}, {15, 1, true}},
			logAllowed: 4, max: 2,
		},
		{
			name: "false allow over the limit", limit: 3, window: 1000,
			events:     []ev{{0, 1, true}, {1, 1, true}, {2, 1, true}, {3, 1, true}},
			logAllowed: 3, falseAllows: 1, max: 4,
		},
		{
			// The engine refuses what the log admits, then admits what the
			// log, having admitted at 0, refuses; at 10 the log's event has
			// left (0, 10] but the engine's at 5 has not: the two diverge.
			name: "false deny then false allow", limit: 1, window: 10,
			events:     []ev{{0, 1, false}, {5, 1, true}, {10, 1, false}},
			logAllowed: 2, falseAllows: 1, falseDenies: 2, max: 1,
		},
		{
			name: "units", limit: 10, window: 100,
			events:     []ev{{0, 6, true}, {50, 5, false}, {99, 4, true}, {100, 6, true}},
			logAllowed: 3, max: 10,
		},
		{
			// 3 in the first window; warm windows (ending ≥ 20) hold 2.
			name: "warm excludes the first windows", limit: 2, window: 10,
			events:     []ev{{0, 1, true}, {1, 1, true}, {2, 1, true}, {20, 1, true}, {25, 1, true}},
			logAllowed: 4, falseAllows: 1, max: 3, warm: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAuditor(tc.limit, tc.window)
			for _, e := range tc.events {
				a.observe(e.t, e.n, e.allowed)
			}
			if a.decisions != int64(len(tc.events)) || a.logAllowed != tc.logAllowed || a.falseAllows != tc.falseAllows ||
				a.falseDenies != tc.falseDenies || a.maxUnits != tc.max || a.maxWarm != tc.warm {
				t.Errorf("decisions %d, log allowed %d, false allows %d, false denies %d, max %d, warm %d; want %d, %d, %d, %d, %d, %d",
					a.decisions, a.logAllowed, a.falseAllows, a.falseDenies, a.maxUnits, a.maxWarm,
					len(tc.events), tc.logAllowed, tc.falseAllows, tc.falseDenies, tc.max, tc.warm)
			}
		})
	}
}

// TestAuditorLongRun checks the FIFO compaction against a quadratic count.
func TestAuditorLongRun(t *testing.T) {
	const limit, window = 50, 1000
	a := newAuditor(limit, window)
	var times []int64
	for i := range int64(20_000) {
		ts := i * 7 / 3
		allowed := i%5 != 0 || i%11 == 0 // an arbitrary engine, sometimes over the limit
		a.observe(ts, 1, allowed)
		if allowed {
			times = append(times, ts)
		}
	}
	var want int64
	for i, end := range times {
		var s int64
		for j := i; j >= 0 && times[j] > end-window; j-- {
			s++
		}
		want = max(want, s)
	}
	if a.maxUnits != want {
		t.Errorf("max in window = %d, want %d", a.maxUnits, want)
	}
	if a.logAllowed == 0 || a.falseAllows == 0 {
		t.Errorf("log allowed %d, false allows %d: the sequence should exceed the limit", a.logAllowed, a.falseAllows)
	}
}

// TestAuditorSeesEngineOvershoot drives each algorithm at fixed instants with
// a burst at the end of a sub-window, and checks what the audit reports.
func TestAuditorSeesEngineOvershoot(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0) // starts a sub-window
	burst := t0.Add(99 * time.Millisecond)
	for _, tc := range []struct {
		alg   engine.Algorithm
		later time.Duration // when the second burst comes
		max   int64         // units the engine admits in one true window
	}{
		// At 1.05 s the weighted estimate counts the burst at 0.099 s at half
		// weight, so 5 more fit while all 10 are still inside (0.05 s, 1.05 s].
		{engine.SlidingWindow, 1050 * time.Millisecond, 15},
		// Strict counts sub-window 0 in full until 1.1 s: nothing fits at
		// 1.05 s, and at 1.1 s the burst has left the true window.
		{engine.SlidingWindowStrict, 1050 * time.Millisecond, 10},
		{engine.SlidingWindowStrict, 1100 * time.Millisecond, 10},
		// A new fixed window opens at 1 s: 10 more fit next to the 10.
		{engine.FixedWindow, 1000 * time.Millisecond, 20},
	} {
		t.Run(tc.alg.String()+"/"+tc.later.String(), func(t *testing.T) {
			e, err := engine.New(engine.Config{Limit: 10, Window: time.Second, SubWindows: 10, Algorithm: tc.alg, DisableEviction: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			a := newAuditor(10, int64(time.Second))
			for _, at := range []time.Time{burst, t0.Add(tc.later)} {
				for range 15 {
					ok := e.AllowAt("k", 1, at).Allowed
					a.observe(at.UnixNano(), 1, ok)
				}
			}
			if a.maxUnits != tc.max {
				t.Errorf("max in window = %d, want %d", a.maxUnits, tc.max)
			}
			alg := tc.alg.String()
			if over := a.overshoot(); (tc.max > 10) != (over > 1.0) {
				t.Errorf("overshoot = %v, want > 1.0 exactly when max %d > 10", over, tc.max)
			}
			if !withinBound(alg, a.maxUnits, a.limit) {
				t.Errorf("%d units in one window exceeds the %s bound %s", a.maxUnits, alg, boundText(alg))
			}
			// The exact log admits the first 10 and nothing at 1.05 s; at
			// 1.1 s the burst has left its window too.
			wantFalse := tc.max - 10
			if tc.later == 1100*time.Millisecond {
				wantFalse = 0
			}
			if a.falseAllows != wantFalse {
				t.Errorf("false allows = %d, want %d", a.falseAllows, wantFalse)
			}
		})
	}
}

func TestAuditRanks(t *testing.T) {
	for _, c := range []struct {
		n, s int
		zipf float64
	}{{1, 1, 1.1}, {10, 10, 1.1}, {100, 64, 1.1}, {1000, 64, 1.1}, {100_000, 64, 1.1}, {100_000, 64, 3}, {1000, 0, 1.1}} {
		r := auditRanks(c.n, c.s, c.zipf)
		if len(r) != c.s {
			t.Fatalf("auditRanks(%d, %d) has %d ranks", c.n, c.s, len(r))
		}
		for i, x := range r {
			if x < 0 || x >= c.n || i > 0 && x <= r[i-1] {
				t.Fatalf("auditRanks(%d, %d) = %v: not distinct, increasing, in range", c.n, c.s, r)
			}
		}
		if c.s > 1 && r[len(r)-1] != c.n-1 {
			t.Errorf("auditRanks(%d, %d) = %v: does not reach the coldest rank", c.n, c.s, r)
		}
		p := &plan{keys: make([]string, c.n)}
		for _, x := range r {
			p.audited = append(p.audited, auditee{rank: x})
		}
		if share := p.auditShare(c.zipf); c.s < c.n/2 && share > maxAuditShare+1e-9 {
			t.Errorf("auditRanks(%d, %d, %v): audited share %v > %v", c.n, c.s, c.zipf, share, maxAuditShare)
		}
	}
	// The normaliser's integral tail agrees with the exact sum.
	var exact float64
	for k := 1; k <= 200_000; k++ {
		exact += math.Pow(float64(k), -1.1)
	}
	if got := zipfMass(200_000, 1.1); math.Abs(got-exact) > 1e-9*exact {
		t.Errorf("zipfMass = %v, exact %v", got, exact)
	}
}
