package engine_test

import (
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// At the Unix epoch itself: a drop at t = 0 must quarantine [0, W).
func TestAuditDropAtEpochZero(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			zero := time.Unix(0, 0)
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 1000, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
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
				e.AllowAt("k", 10, atMs(zero, i*10))
			}
			r = e.Audit()
			t.Logf("%+v", r)
			if r.Judged != 0 && (r.FalseDenies != 0 || r.Judged > 56) {
				t.Errorf("judged inside the window of a drop at t=0: %+v", r)
			}
		})
	}
}

// Promise (README "Memory, bounded"; design §9): a shadowed key's log holds
// at most the units one window can admit (L for Strict and the log), and
// "cancelled reservations leave nothing in the log". A sequential caller:
// reserve 1, decisions that fill the buffer, Cancel (its unadmit finds the
// buffer full), drain; repeated 50 times inside one window at L = 1.
func TestAuditDroppedUnadmitsKeepLogWithinL(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
		for i := 0; i < 50; i++ {
			at := atMs(t0, i)
			r := e.ReserveAt("k", 1, at)
			if !r.Decision().Allowed {
				t.Fatalf("%v: reserve %d denied", alg, i)
			}
			for q := 0; q < 100; q++ {
				e.AllowAt("k", 1, at)
			}
			if !r.Cancel() {
				t.Fatal("cancel")
			}
			e.Audit()
		}
		rep := e.Audit()
		t.Logf("%v %+v", alg, rep)
		if rep.Entries > 1 {
			t.Errorf("%v: Entries = %d for one key at L = 1 (no reservation is held)", alg, rep.Entries)
		}
	}
}

// Same, with AuditMaxEntries 32: the cancelled reservations' leftovers push
// the key (which holds nothing) out of the audit, the failure the design
// says removing emptied entries fixed.
func TestAuditDroppedUnadmitsPushKeyOut(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: engine.SlidingWindowStrict, Audit: 1, AuditBuffer: 64, AuditMaxEntries: 32, DisableEviction: true})
	for i := 0; i < 100; i++ {
		at := atMs(t0, i)
		r := e.ReserveAt("k", 1, at)
		for q := 0; q < 100; q++ {
			e.AllowAt("k", 1, at)
		}
		r.Cancel()
		e.Audit()
	}
	rep := e.Audit()
	t.Logf("%+v", rep)
	if rep.KeysSkipped != 0 || rep.Entries > 1 {
		t.Errorf("KeysSkipped %d, Entries %d: a key holding no reservation was pushed out by cancelled ones", rep.KeysSkipped, rep.Entries)
	}
}

// Strict, L = 2, W = 1 s, 10 sub-windows, AuditBuffer 64, one sequential
// caller. A denial at 5.6566 s makes that the key's newest judged time; a
// reservation requested at 5.335 s is decided at the sub-window start
// 5.6 s and its unit logged at 5.6566 s. Decisions requested at 5.18 s
// (decided at 5.6 s) fill the buffer, so the Cancel's unadmit is dropped:
// the quarantine is [5.6 s, 6.6 s). At 6.6435 s the engine rightly admits
// 2 (the cancelled unit was given back), but the audit judges it against a
// log still holding the cancelled unit at 5.6566 s: a false admit for
// Strict, which the README says never happens.
func TestAuditDroppedUnadmitOutlivesQuarantine(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
		at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
		if !e.AllowAt("a", 1, at(5000)).Allowed {
			t.Fatal("5.0")
		}
		if e.AllowAt("a", 2, at(5656.6)).Allowed {
			t.Fatal("5.6566 admitted")
		}
		e.Audit()
		r := e.ReserveAt("a", 1, at(5335))
		if !r.Decision().Allowed {
			t.Fatal("reserve")
		}
		for q := 0; q < 100; q++ {
			e.AllowAt("a", 2, at(5180))
		}
		if !r.Cancel() {
			t.Fatal("cancel")
		}
		e.Audit()
		d := e.AllowAt("a", 2, at(6643.5))
		rep := e.Audit()
		t.Logf("%v reserve at %v; admit at 6.6435: %v; %+v", alg, r.At().Sub(t0), d.Allowed, rep)
		if rep.FalseAdmits != 0 {
			t.Errorf("%v: FalseAdmits = %d (WorstWindow %v); the engine held 2 units = L in every window", alg, rep.FalseAdmits, rep.WorstWindow)
		}
	}
}

// Strict, L = 1: a reservation, a full buffer, its Cancel (unadmit and
// settle dropped), then an admission into the freed room.
func TestAuditDroppedUnadmitThenAdmit(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
		r := e.ReserveAt("k", 1, t0)
		for q := 0; q < 100; q++ {
			e.AllowAt("k", 1, t0)
		}
		if !r.Cancel() {
			t.Fatal("cancel")
		}
		e.Audit()
		d := e.AllowAt("k", 1, atMs(t0, 1))
		rep := e.Audit()
		t.Logf("%v %v %+v", alg, d.Allowed, rep)
		if rep.FalseAdmits != 0 {
			t.Errorf("%v: false admit", alg)
		}
	}
}

// A Cancel whose take-back finds the ring full: the engine gives the units
// back, the log must either take them out or not judge what follows.
func TestAuditCancelIntoFullRing(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
			e.Close() // no background drain
			r := e.ReserveAt("k", 5, t0)
			if !r.Decision().Allowed {
				t.Fatal("reserve denied")
			}
			for i := 0; i < 4; i++ {
				if !e.AllowAt("k", 1, t0).Allowed {
					t.Fatal("denied")
				}
			}
			// fill the ring with another key's denials-free decisions: 5 used, 59 more
			for i := 0; i < 59; i++ {
				e.AllowAt("other", 1, t0.Add(-time.Hour)) // far away, its own key
			}
			if !r.Cancel() {
				t.Fatal("cancel gave nothing back")
			}
			rep := e.Audit()
			t.Logf("after cancel: %+v", rep)
			// The engine has 4 units; 5 more fit.
			d := e.AllowAt("k", 5, atMs(t0, 1))
			if !d.Allowed {
				t.Fatalf("engine refused: %+v", d)
			}
			d = e.AllowAt("k", 1, atMs(t0, 2))
			rep = e.Audit()
			t.Logf("final: %+v", rep)
			checkReportConsistent(t, rep)
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
func TestAuditDropNear2262(t *testing.T) {
	end := time.Unix(0, math.MaxInt64)
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindowStrict} {
		for _, w := range []time.Duration{time.Hour, 24 * time.Hour} {
			t.Run(alg.String()+"/"+w.String(), func(t *testing.T) {
				base := end.Add(-w / 2).Truncate(time.Second)
				e := newEngineNoCloseCheck(t, engine.Config{Limit: 1000, Window: w, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
				e.Close()
				for i := range 100 {
					if !e.AllowAt("k", 1, atMs(base, i)).Allowed {
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
					e.AllowAt("k", 1, atMs(base, i))
				}
				rep = e.Audit()
				t.Logf("%+v", rep)
				checkReportConsistent(t, rep)
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
func TestAuditDroppedClampedDecision(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 1000, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
			e.Close()
			base := atMs(t0, 5000)
			for i := 0; i < 56; i++ { // decisions fill 7/8 of the buffer
				e.AllowAt("k", 1, base)
			}
			// dropped, requested at 1 s, decided at 5 s
			if d := e.AllowAt("k", 500, atMs(t0, 1000)); !d.Allowed {
				t.Fatal("denied")
			}
			r := e.Audit()
			if r.Dropped != 1 {
				t.Fatalf("dropped %d", r.Dropped)
			}
			for i := 0; i < 10; i++ {
				e.AllowAt("k", 100, atMs(base, 100+i))
			}
			r = e.Audit()
			t.Logf("%+v", r)
			if r.Judged != 0 {
				t.Errorf("decisions inside the window after a dropped one (decided at 5 s) were judged: %+v", r)
			}
		})
	}
}
