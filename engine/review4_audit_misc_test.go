package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A Cancel that gives nothing back (the sub-window left the key's window)
// "changes nothing": neither Unadmits nor UnadmitMissed.
func TestReview4AuditNoopCancelCountsNothing(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(advT0)
			e := advNew(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, DisableEviction: true, Clock: clk})
			r := e.ReserveAt("k", 3, advT0)
			e.AllowAt("k", 1, advMs(advT0, 5000))
			clk.Set(advMs(advT0, 5000))
			if r.Cancel() {
				t.Fatal("cancel gave back")
			}
			rep := e.Audit()
			if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
				t.Errorf("no-op cancel counted: %+v", rep)
			}
			// a second cancel of the same reservation
			r.Cancel()
			rep = e.Audit()
			if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
				t.Errorf("second cancel counted: %+v", rep)
			}
			advConsistent(t, rep)
		})
	}
}

// Sweep evicts the key (idle by the clock); a reservation from before is
// cancelled after the key was recreated: Cancel gives nothing back.
func TestReview4AuditCancelAfterEviction(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(advT0)
			e := advNew(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, Clock: clk, SweepInterval: time.Hour})
			r := e.ReserveAt("k", 10, advT0)
			clk.Set(advMs(advT0, 3500))
			if got := e.Sweep(); got != 1 {
				t.Fatalf("swept %d", got)
			}
			now := advMs(advT0, 3500)
			if !e.AllowAt("k", 10, now).Allowed {
				t.Fatal("denied")
			}
			ok := r.Cancel()
			d := e.AllowAt("k", 1, now)
			rep := e.Audit()
			t.Logf("cancel=%v d=%+v %+v", ok, d, rep)
			advConsistent(t, rep)
			if rep.FalseAdmits != 0 || (alg == engine.SlidingLog && rep.FalseDenies != 0) {
				t.Errorf("%+v", rep)
			}
			if !ok && (rep.Unadmits != 0 || rep.UnadmitMissed != 0) {
				t.Errorf("no-op cancel counted: %+v", rep)
			}
		})
	}
}

func TestReview4AuditCloseOffAndRefused(t *testing.T) {
	e := advNew(t, engine.Config{Limit: 5, Window: time.Second})
	e.AllowAt("k", 1, advT0)
	if r := e.Audit(); r != (engine.AuditReport{}) {
		t.Errorf("audit off: %+v", r)
	}
	if e.Audited("k") {
		t.Error("Audited with Audit 0")
	}
	e2 := advNew(t, engine.Config{Limit: 5, Window: time.Second, Audit: 1, MaxKeys: 1, KeyLimit: func(k string) int64 {
		if k == "bad" {
			return -1
		}
		return 0
	}, DisableEviction: true})
	e2.Close()
	e2.Close()
	e2.AllowAt("k", 1, advT0)
	e2.AllowAt("k", 0, advT0)                                          // peek
	e2.AllowAt("k", 6, advT0)                                          // n > limit
	e2.AllowAt("k", -1, advT0)                                         // n < 0
	e2.AllowAt("k", 1, time.Unix(-5, 0))                               // before 1970
	e2.AllowAt("other", 1, advT0)                                      // MaxKeys
	e2.AllowAt("bad", 1, advT0)                                        // KeyLimit out of range
	e2.ReserveAt("k", 0, advT0)                                        // peek
	engine.AllowAll(advT0, engine.Request{Engine: e2, Key: "k", N: 9}) // never
	r := e2.Audit()
	if r.Decisions != 1 || r.Share != 1 {
		t.Errorf("after Close: %+v", r)
	}
	advConsistent(t, r)
}

func TestReview4AuditUnsampledAllocs(t *testing.T) {
	e := advNew(t, engine.Config{Limit: 1 << 30, Window: time.Second, Audit: 0.5, DisableEviction: true})
	var un, sa string
	for i := 0; un == "" || sa == ""; i++ {
		k := fmt.Sprint("key", i)
		if e.Audited(k) {
			sa = k
		} else {
			un = k
		}
	}
	e.Close() // stops the drain goroutine, whose allocations AllocsPerRun would count
	for _, k := range []string{un, sa} {
		e.AllowAt(k, 1, advT0)
		if a := testing.AllocsPerRun(200, func() { e.AllowAt(k, 1, advT0) }); a != 0 {
			t.Errorf("AllowAt %s allocs %v", k, a)
		}
		if a := testing.AllocsPerRun(200, func() { e.Allow(k) }); a != 0 {
			t.Errorf("Allow %s allocs %v", k, a)
		}
		if a := testing.AllocsPerRun(200, func() { r := e.ReserveAt(k, 1, advT0); r.Cancel() }); a != 0 {
			t.Errorf("Reserve/Cancel %s allocs %v", k, a)
		}
		reqs := []engine.Request{{Engine: e, Key: k, N: 1}, {Engine: e, Key: k, N: 1 << 31}}
		if a := testing.AllocsPerRun(200, func() { engine.AllowAll(advT0, reqs...) }); a != 0 {
			t.Errorf("AllowAll %s allocs %v", k, a)
		}
	}
}
