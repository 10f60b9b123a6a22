package engine_test

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// KeysSkipped "counts sampled keys that were refused a log, or lost
// theirs"; Skipped counts their decisions. AuditMaxKeys = 1: "a" gets the
// log, the other keys are refused one, 5 decisions each, all inside one
// window.
func TestAuditKeysSkippedCountsKeys(t *testing.T) {
	for _, others := range []int{1, 2, 3, 10} {
		t.Run(fmt.Sprint(others), func(t *testing.T) {
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 100, Window: time.Second, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
			e.AllowAt("a", 1, t0)
			for k := 0; k < others; k++ {
				for i := 0; i < 5; i++ {
					e.AllowAt(fmt.Sprint("o", k), 1, atMs(t0, i))
				}
			}
			r := e.Audit()
			t.Logf("%+v", r)
			if r.Skipped != int64(5*others) {
				t.Errorf("Skipped = %d, want %d", r.Skipped, 5*others)
			}
			if r.KeysSkipped != int64(others) {
				t.Errorf("KeysSkipped = %d, want %d (keys refused a log)", r.KeysSkipped, others)
			}
		})
	}
}

// Caps: Keys ≤ AuditMaxKeys and Entries ≤ AuditMaxEntries at every report,
// and a key that lost its log is never judged on an incomplete one
// (Strict: no false admits; log: no false decisions at all).
func TestAuditCapsRandom(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		for _, caps := range [][2]int{{1, 1}, {2, 3}, {3, 10}, {50, 7}} {
			t.Run(fmt.Sprint(alg, caps), func(t *testing.T) {
				e := newEngineNoCloseCheck(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1,
					AuditMaxKeys: caps[0], AuditMaxEntries: int64(caps[1]), DisableEviction: true})
				now := t0
				for i := 0; i < 3000; i++ {
					now = now.Add(time.Duration((i*7919)%97) * time.Millisecond / 3)
					key := fmt.Sprint("k", (i*31)%5)
					e.AllowAt(key, int64(1+(i*13)%3), now)
					if i%50 == 0 {
						r := e.Audit()
						if r.Keys > caps[0] || r.Entries > int64(caps[1]) {
							t.Fatalf("over the caps: %+v", r)
						}
					}
				}
				r := e.Audit()
				t.Logf("%+v", r)
				checkReportConsistent(t, r)
				if r.FalseAdmits != 0 || (alg == engine.SlidingLog && r.FalseDenies != 0) {
					t.Errorf("judged on an incomplete log: %+v", r)
				}
			})
		}
	}
}

// Sequential SlidingLog / Strict keys near the end of time: every decision
// should be judged and none false.
func TestAuditFarIdleAndCaps(t *testing.T) {
	end := time.Unix(0, math.MaxInt64)
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingWindowStrict, engine.SlidingWindow} {
		for _, w := range []time.Duration{time.Second, time.Hour, 24 * time.Hour, 1 << 58} {
			for _, frac := range []int64{2, 3, 1} {
				t.Run(alg.String()+"/"+w.String(), func(t *testing.T) {
					base := end.Add(-w / time.Duration(frac*2)).Truncate(time.Millisecond)
					if frac == 1 {
						base = end.Add(-time.Duration(float64(w) * 1.5)).Truncate(time.Millisecond)
					}
					e := newEngineNoCloseCheck(t, engine.Config{Limit: 5, Window: w, SubWindows: 4, Algorithm: alg, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
					for i := range 5 {
						if !e.AllowAt("a", 1, atMs(base, i)).Allowed {
							t.Fatalf("denied at %d", i)
						}
					}
					r0 := e.Audit()
					if d := e.AllowAt("a", 1, atMs(base, 10)); d.Allowed {
						t.Fatalf("admitted 6th")
					}
					r1 := e.Audit()
					t.Logf("%+v\n%+v", r0, r1)
					checkReportConsistent(t, r1)
					if r1.Unjudged != 0 || r1.FalseDenies != 0 || r1.FalseAdmits != 0 {
						t.Errorf("sequential key near 2262: %+v", r1)
					}
					// b is refused a log by the cap (AuditMaxKeys 1): its units are unlogged.
					for i := range 5 {
						e.AllowAt("b", 1, atMs(base, 20+i))
					}
					// b again, still inside the window of its unlogged units
					e.AllowAt("b", 1, atMs(base, 30))
					r2 := e.Audit()
					t.Logf("%+v", r2)
					if r2.FalseDenies != r1.FalseDenies || r2.FalseAdmits != 0 {
						t.Errorf("b judged on an incomplete log: %+v", r2)
					}
				})
			}
		}
	}
}

// One key kept out by AuditMaxKeys for many windows, "a" holding the only
// log all along: it is counted "once while it stays out".
func TestAuditKeysSkippedStaysOut(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 100, Window: time.Second, SubWindows: 4, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
	decisions := 0
	for ms := 0; ms < 10_000; ms += 100 {
		now := atMs(t0, ms)
		e.AllowAt("a", 1, now)
		e.AllowAt("o", 1, now)
		decisions++
		if ms%700 == 0 {
			e.Audit()
		}
	}
	r := e.Audit()
	t.Logf("%+v", r)
	if r.Skipped != int64(decisions) {
		t.Errorf("Skipped = %d, want %d", r.Skipped, decisions)
	}
	if r.KeysSkipped != 1 {
		t.Errorf("KeysSkipped = %d, want 1: one key, out the whole time", r.KeysSkipped)
	}
}

// Beyond the remembered keys KeysSkipped is a lower bound: it must never
// exceed the number of distinct keys kept out (each kept out the whole
// time, while "a" holds the only log).
func TestAuditKeysSkippedIsALowerBound(t *testing.T) {
	for _, cfg := range []struct{ maxKeys, others int }{{1, 5000}, {1, 4096}, {1, 4097}, {5000, 12000}} {
		t.Run(fmt.Sprint(cfg), func(t *testing.T) {
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 1000, Window: time.Second, SubWindows: 4, Audit: 1, AuditMaxKeys: cfg.maxKeys, DisableEviction: true, AuditBuffer: 1 << 20})
			for i := 0; i < cfg.maxKeys; i++ {
				e.AllowAt(fmt.Sprint("a", i), 1, t0)
			}
			var dec int64
			for round := 0; round < scaled(3, 6); round++ {
				now := atMs(t0, round*600)
				for i := 0; i < cfg.maxKeys; i++ {
					e.AllowAt(fmt.Sprint("a", i), 1, now)
				}
				for i := 0; i < cfg.others; i++ {
					e.AllowAt(fmt.Sprint("o", i), 1, now)
					dec++
				}
				e.Audit()
			}
			r := e.Audit()
			t.Logf("%+v", r)
			if r.Dropped != 0 {
				t.Fatalf("dropped")
			}
			if r.Skipped != dec {
				t.Errorf("Skipped = %d, want %d", r.Skipped, dec)
			}
			if r.KeysSkipped > int64(cfg.others) {
				t.Errorf("KeysSkipped = %d: more than the %d distinct keys ever kept out (a lower bound, said the doc)", r.KeysSkipped, cfg.others)
			}
			if r.Keys > cfg.maxKeys {
				t.Errorf("Keys %d over the cap", r.Keys)
			}
		})
	}
}

// "o" is refused a log at 0, then comes back at 3 s, 6 s, 9 s, each time
// refused again ("a" holds the only log throughout). Each refusal comes
// after the previous one's units left the window, so each is a refusal
// anew: KeysSkipped counts 4, as AuditReport documents (whether it meant
// 1 was once unclear; the doc now says which).
func TestAuditKeysSkippedGap(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 100, Window: time.Second, SubWindows: 4, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
	for ms := 0; ms < 10_000; ms += 100 {
		e.AllowAt("a", 1, atMs(t0, ms))
		if ms%3000 == 0 {
			e.AllowAt("o", 1, atMs(t0, ms))
		}
	}
	r := e.Audit()
	t.Logf("%+v", r)
	if r.KeysSkipped != 4 || r.Skipped != 4 {
		t.Errorf("KeysSkipped = %d, Skipped = %d for one key refused 4 times, each a window after the last", r.KeysSkipped, r.Skipped)
	}
}

// Skip records are bounded: "skip records (with a copy of the key) for at
// most max(AuditMaxKeys, 4,096) + AuditMaxKeys keys". 100,000 distinct
// 1 KiB keys kept out within one window, with reservations cancelled: the
// audit's extra heap must stay near 8,193 key copies (~8 MiB + overhead),
// not grow with the keys.
func TestAuditSkipMemory(t *testing.T) {
	if raceOn {
		t.Skip()
	}
	pad := strings.Repeat("x", 1024)
	run := func(audit float64) int64 {
		cfg := engine.Config{Limit: 10, Window: time.Hour, Audit: audit, DisableEviction: true}
		if audit > 0 {
			cfg.AuditMaxKeys = 1
		}
		e := newEngineNoCloseCheck(t, cfg)
		h0 := heapAlloc()
		for i := 0; i < 100_000; i++ {
			k := fmt.Sprint(i, pad)
			r := e.ReserveAt(k, 1, atMs(t0, i/100))
			r.Cancel()
			if i%5000 == 0 {
				e.Audit()
			}
		}
		rep := e.Audit()
		h := int64(heapAlloc()) - int64(h0)
		t.Logf("audit=%v: +%d MB %+v", audit, h>>20, rep)
		return h
	}
	off := run(0)
	on := run(1)
	if extra := on - off; extra > 32<<20 {
		t.Errorf("audit holds %d MB more than the engine alone for 100,000 skipped keys", extra>>20)
	}
}

// heapAlloc is the live heap after two collections.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// "A key kept out of the logs by a cap counts no cancels"; KeysSkipped
// counts each refusal once; Unadmits ≤ successful cancels of audited keys.
func TestAuditCapKeyCancels(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 3, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
		e.AllowAt("a", 1, t0)
		e.Audit()
		// b: refused a log. Reserve, cancel, reserve, cancel inside one window.
		var ok int
		for i := 0; i < 5; i++ {
			r := e.ReserveAt("b", 1, atMs(t0, 10*i))
			if r.Cancel() {
				ok++
			}
		}
		rep := e.Audit()
		t.Logf("%v %+v", alg, rep)
		if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
			t.Errorf("%v: skipped key counted cancels: Unadmits %d Missed %d", alg, rep.Unadmits, rep.UnadmitMissed)
		}
		if rep.KeysSkipped != 1 {
			t.Errorf("%v: KeysSkipped = %d, want 1 (one refusal)", alg, rep.KeysSkipped)
		}
		// a's log idles out (two windows), b comes back after its units left: gets the log.
		r := e.ReserveAt("b", 1, atMs(t0, 3500))
		if !r.Cancel() {
			t.Fatal("cancel")
		}
		rep2 := e.Audit()
		t.Logf("%v %+v", alg, rep2)
		if rep2.Unadmits > 1 {
			t.Errorf("%v: Unadmits %d > 1 successful audited cancel", alg, rep2.Unadmits)
		}
		if rep2.Entries != 0 {
			t.Errorf("%v: Entries %d after the only reservation was cancelled", alg, rep2.Entries)
		}
		checkReportConsistent(t, rep2)
	}
}

// KeysSkipped "once per refusal, which lasts until the key's unlogged units
// have left the window (a key refused again after that counts again)".
// Cancelled reservations of the refused key must not extend or split it.
func TestAuditKeysSkippedPerRefusal(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 3, Window: time.Second, SubWindows: 10, Algorithm: engine.SlidingWindowStrict, Audit: 1, AuditMaxKeys: 1, DisableEviction: true})
	keepA := func(ms int) { e.AllowAt("a", 1, atMs(t0, ms)) }
	keepA(0)
	e.Audit()
	r := e.ReserveAt("b", 1, atMs(t0, 10)) // refusal 1
	keepA(300)
	r.Cancel()
	e.AllowAt("b", 1, atMs(t0, 500)) // same refusal
	keepA(900)
	rep := e.Audit()
	if rep.KeysSkipped != 1 {
		t.Errorf("after one refusal: KeysSkipped %d", rep.KeysSkipped)
	}
	keepA(1400)
	keepA(1600)
	e.AllowAt("b", 1, atMs(t0, 1700)) // b's units (0.5 s) have left: refusal 2
	keepA(1800)
	rep = e.Audit()
	t.Logf("%+v", rep)
	if rep.KeysSkipped != 2 {
		t.Errorf("after two refusals: KeysSkipped %d", rep.KeysSkipped)
	}
	if rep.Unadmits != 0 || rep.UnadmitMissed != 0 {
		t.Errorf("skipped key's cancel counted: %d/%d", rep.Unadmits, rep.UnadmitMissed)
	}
}

// Reserve and cancel at one instant, many times: the units held never pass
// 1, yet the doc bounds a shadowed key's log by "one entry per admission
// still inside its window, so at most the units one window can admit ...
// L for Strict and the log".
func TestAuditEntriesAfterCancels(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			const L = 100
			e := newEngineNoCloseCheck(t, engine.Config{Limit: L, Window: time.Hour, Algorithm: alg, Audit: 1, DisableEviction: true})
			for i := 0; i < scaled(25_000, 200_000); i++ {
				r := e.ReserveAt("k", 1, t0)
				if !r.Decision().Allowed {
					t.Fatalf("%d: %+v", i, r.Decision())
				}
				r.Cancel()
				if i%2000 == 0 {
					e.Audit()
				}
			}
			rep := e.Audit()
			t.Logf("%+v", rep)
			if rep.Dropped != 0 {
				t.Fatalf("dropped")
			}
			if rep.Entries > 2*L {
				t.Errorf("Entries = %d for one key holding 0 units (limit %d)", rep.Entries, L)
			}
			if rep.KeysSkipped != 0 {
				t.Errorf("the key lost its log: %+v", rep)
			}
		})
	}
}

// A key kept out by AuditMaxEntries: its reservations' cancels are counted
// as Unadmits and, worse, as UnadmitMissed ("units had already left the
// exact window at the key's newest time") although every unit is at the
// key's newest time, inside its window. Its decisions are Skipped, not in
// Decisions.
func TestAuditSkippedKeyCancelsCounted(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 100, Window: time.Hour, Algorithm: alg, Audit: 1, DisableEviction: true, AuditMaxKeys: 1})
			e.AllowAt("a", 1, t0) // holds the only log
			var rs [10]engine.Reservation
			for i := range rs {
				rs[i] = e.ReserveAt("o", 1, t0)
			}
			for i := range rs {
				if !rs[i].Cancel() {
					t.Fatal("cancel")
				}
			}
			rep := e.Audit()
			t.Logf("%+v", rep)
			if rep.KeysSkipped != 1 || rep.Skipped != 10 {
				t.Fatalf("setup: %+v", rep)
			}
			if rep.UnadmitMissed != 0 {
				t.Errorf("UnadmitMissed = %d: units at the key's newest time, inside its window, reported as having left it", rep.UnadmitMissed)
			}
			if rep.Unadmits > rep.Admits {
				t.Errorf("Unadmits = %d > Admits = %d: cancels counted for decisions that were Skipped (not in Decisions)", rep.Unadmits, rep.Admits)
			}
		})
	}
}

// The consequence: with AuditMaxEntries at 10·L, a key that never holds
// more than 1 unit loses its log (KeysSkipped) after 1,000 reserve+cancel
// pairs inside one window, and its decisions go unaudited.
func TestAuditCancelsEvictLog(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			const L = 100
			e := newEngineNoCloseCheck(t, engine.Config{Limit: L, Window: time.Hour, Algorithm: alg, Audit: 1, DisableEviction: true, AuditMaxEntries: 10 * L})
			for i := 0; i < 2000; i++ {
				r := e.ReserveAt("k", 1, t0)
				r.Cancel()
			}
			rep := e.Audit()
			t.Logf("%+v", rep)
			if rep.KeysSkipped != 0 || rep.Skipped != 0 {
				t.Errorf("a key holding at most 1 of its %d units was refused its log by AuditMaxEntries = %d: %+v", L, 10*L, rep)
			}
		})
	}
}
