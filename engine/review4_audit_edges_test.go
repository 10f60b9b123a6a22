package engine_test

import (
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

var advT0 = time.Unix(1_700_000_000, 0)

func advMs(base time.Time, ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

func advNew(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func advConsistent(t *testing.T, r engine.AuditReport) {
	t.Helper()
	if r.Decisions != r.Admits+r.Denies || r.Decisions != r.Judged+r.Unjudged {
		t.Errorf("inconsistent report: %+v", r)
	}
}

// A Cancel whose take-back finds the ring full: the engine gives the units
// back, the log must either take them out or not judge what follows.
func TestReview4AuditCancelIntoFullRing(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			e := advNew(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
			e.Close() // no background drain
			r := e.ReserveAt("k", 5, advT0)
			if !r.Decision().Allowed {
				t.Fatal("reserve denied")
			}
			for i := 0; i < 4; i++ {
				if !e.AllowAt("k", 1, advT0).Allowed {
					t.Fatal("denied")
				}
			}
			// fill the ring with another key's denials-free decisions: 5 used, 59 more
			for i := 0; i < 59; i++ {
				e.AllowAt("other", 1, advT0.Add(-time.Hour)) // far away, its own key
			}
			if !r.Cancel() {
				t.Fatal("cancel gave nothing back")
			}
			rep := e.Audit()
			t.Logf("after cancel: %+v", rep)
			// The engine has 4 units; 5 more fit.
			d := e.AllowAt("k", 5, advMs(advT0, 1))
			if !d.Allowed {
				t.Fatalf("engine refused: %+v", d)
			}
			d = e.AllowAt("k", 1, advMs(advT0, 2))
			rep = e.Audit()
			t.Logf("final: %+v", rep)
			advConsistent(t, rep)
			if rep.FalseAdmits != 0 {
				t.Errorf("%v: a sequential key after a Cancel whose take-back met a full ring shows %d false admits (Dropped=%d, Unadmits=%d)", alg, rep.FalseAdmits, rep.Dropped, rep.Unadmits)
			}
			if rep.FalseDenies != 0 && alg == engine.SlidingLog {
				t.Errorf("log false denies %d", rep.FalseDenies)
			}
		})
	}
}

// Times near the end of representable time: quarantine ends, skip-record
// ends and idle limits computed as t + W (or t + 2W) overflow int64.
func TestReview4AuditDropNear2262(t *testing.T) {
	end := time.Unix(0, math.MaxInt64)
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindowStrict} {
		for _, w := range []time.Duration{time.Hour, 24 * time.Hour} {
			t.Run(alg.String()+"/"+w.String(), func(t *testing.T) {
				base := end.Add(-w / 2).Truncate(time.Second)
				e := advNew(t, engine.Config{Limit: 1000, Window: w, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
				e.Close()
				for i := range 100 {
					if !e.AllowAt("k", 1, advMs(base, i)).Allowed {
						t.Fatalf("denied at %d", i)
					}
				}
				rep := e.Audit()
				t.Logf("%+v", rep)
				if rep.Dropped != 44 { // 100 decisions, 56 cells for decisions
					t.Fatalf("dropped %d", rep.Dropped)
				}
				// within one window after the drops: must be unjudged
				for i := 200; i < 210; i++ {
					e.AllowAt("k", 1, advMs(base, i))
				}
				rep = e.Audit()
				t.Logf("%+v", rep)
				advConsistent(t, rep)
				if rep.Unjudged != 10 {
					t.Errorf("decisions within W after a drop: Unjudged=%d, want 10 (%+v)", rep.Unjudged, rep)
				}
			})
		}
	}
}

// A decision that is dropped (ring full) with a request time older than the
// key's newest sub-window is decided (and counts) at that sub-window. The
// window after it must be unjudged: "Dropped ... the window after each is
// Unjudged".
func TestReview4AuditDroppedClampedDecision(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := advNew(t, engine.Config{Limit: 1000, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
			e.Close()
			base := advMs(advT0, 5000)
			for i := 0; i < 56; i++ { // decisions fill 7/8 of the buffer
				e.AllowAt("k", 1, base)
			}
			// dropped, requested at 1 s, decided at 5 s
			if d := e.AllowAt("k", 500, advMs(advT0, 1000)); !d.Allowed {
				t.Fatal("denied")
			}
			r := e.Audit()
			if r.Dropped != 1 {
				t.Fatalf("dropped %d", r.Dropped)
			}
			for i := 0; i < 10; i++ {
				e.AllowAt("k", 100, advMs(base, 100+i))
			}
			r = e.Audit()
			t.Logf("%+v", r)
			if r.Judged != 0 {
				t.Errorf("decisions inside the window after a dropped one (decided at 5 s) were judged: %+v", r)
			}
		})
	}
}
