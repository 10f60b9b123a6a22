package engine

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAuditRingConcurrent: producers push through a small ring for many
// laps while one consumer pops; every event pushed is popped exactly once,
// and every push that failed found the ring full.
func TestAuditRingConcurrent(t *testing.T) {
	const producers, each = 4, 5000
	r := newAuditRing(64)
	var wg sync.WaitGroup
	pushed := make([][]bool, producers)
	for p := range producers {
		pushed[p] = make([]bool, each)
		wg.Go(func() {
			for i := range each {
				_, pushed[p][i] = r.push(auditEvent{key: "k", t: int64(p), n: int64(i)}, 0)
			}
		})
	}
	seen := make([][]int, producers)
	for p := range seen {
		seen[p] = make([]int, each)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		for {
			ev, ok := r.pop()
			if !ok {
				break
			}
			seen[ev.t][ev.n]++
		}
		if finished {
			break
		}
	}
	var ok, full int
	for p := range producers {
		for i := range each {
			switch {
			case pushed[p][i] && seen[p][i] == 1:
				ok++
			case !pushed[p][i] && seen[p][i] == 0:
				full++
			default:
				t.Fatalf("event %d/%d: pushed %v, seen %d times", p, i, pushed[p][i], seen[p][i])
			}
		}
	}
	require.Positive(t, ok)
	t.Logf("%d events passed, %d found the ring full", ok, full)
}

// takeBackAt buffers an unadmit of n units of the admission id (made at
// ref), at t, and its settling as kept: what Engine.auditCancel does around
// an engine Cancel that gave the units back.
func (a *auditor) takeBackAt(key string, ref int64, id uint64, n, t int64) {
	pos, _ := a.push(auditEvent{key: key, t: t, ref: ref, n: n, id: id, kind: evUnadmit})
	a.push(auditEvent{key: key, t: t, ref: ref, n: n, id: pos, kind: evKept})
}

// TestAuditUnadmit: an unadmit takes units of the named admission out of
// the key's log, never below zero, removes the entry it empties, and
// counts as missed when the admission has left the window (or is unknown,
// or its key has no log). The engine's own units stay (no
// engine Cancel here): the audit then sees its denials as false, which is
// how the test observes the log.
func TestAuditUnadmit(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	e, err := New(Config{Limit: 10, Window: time.Second, SubWindows: 10, Algorithm: SlidingWindowStrict, Audit: 1, DisableEviction: true})
	require.NoError(t, err)
	defer e.Close()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ns := func(ms int) int64 { return at(ms).UnixNano() }
	r1 := e.ReserveAt("k", 6, at(100))
	r2 := e.ReserveAt("k", 4, at(120))
	require.True(t, r1.Decision().Allowed && r2.Decision().Allowed)
	require.NotZero(t, r1.auditID)
	e.audit.takeBackAt("k", r1.audit-1, r1.auditID, 3, ns(150))
	// The engine holds 10, the log 7: a denial of 3 is false, of 4 right.
	require.False(t, e.AllowAt("k", 3, at(200)).Allowed)
	require.False(t, e.AllowAt("k", 4, at(200)).Allowed)
	r := e.Audit()
	require.Equal(t, int64(1), r.FalseDenies)
	require.Equal(t, int64(1), r.Unadmits)
	require.Zero(t, r.UnadmitMissed)
	require.Equal(t, int64(2), r.Entries)
	// More than the admission had: only its 3 remaining units go, and its
	// emptied entry with them.
	e.audit.takeBackAt("k", r1.audit-1, r1.auditID, 50, ns(250))
	require.False(t, e.AllowAt("k", 6, at(300)).Allowed) // log 4: 4 + 6 ≤ 10, false
	require.False(t, e.AllowAt("k", 7, at(300)).Allowed) // 4 + 7 > 10, right
	r = e.Audit()
	require.Equal(t, int64(1), r.Entries, "the emptied entry is removed")
	// Again: nothing left of it. An unknown admission. A key with no log
	// (not kept out by a cap: as a key whose idle log was dropped).
	e.audit.takeBackAt("k", r1.audit-1, r1.auditID, 1, ns(310))
	e.audit.takeBackAt("k", ns(110), 0, 1, ns(310))
	e.audit.takeBackAt("nobody", ns(110), 7, 1, ns(310))
	r = e.Audit()
	require.Equal(t, int64(2), r.FalseDenies)
	require.Equal(t, int64(5), r.Unadmits)
	require.Equal(t, int64(3), r.UnadmitMissed)
	// After the window the admission is gone: missed.
	require.True(t, e.AllowAt("k", 1, at(1500)).Allowed)
	e.Audit()
	e.audit.takeBackAt("k", r2.audit-1, r2.auditID, 4, ns(1500))
	r = e.Audit()
	require.Equal(t, int64(4), r.UnadmitMissed)
	require.Equal(t, int64(1), r.Entries)
}

// TestShadowKeyUnadmit exercises the log's own methods at their edges.
func TestShadowKeyUnadmit(t *testing.T) {
	k := &shadowKey{}
	for i, n := range []int64{2, 5, 3} {
		k.log = append(k.log, auditEntry{t: int64(10 * i), id: uint64(i + 1), n: n})
		k.sum += n
	}
	took, _, emptied := k.unadmit(10, 2, 9)
	require.Equal(t, int64(5), took)
	require.True(t, emptied)
	require.Len(t, k.log, 2)
	took, _, _ = k.unadmit(10, 2, 1)
	require.Zero(t, took, "gone")
	took, _, _ = k.unadmit(10, 3, 1) // the entry at 20, id 3, found from ref 10
	require.Equal(t, int64(1), took)
	require.Equal(t, int64(4), k.sum)
	took, _, emptied = k.unadmit(0, 1, 1)
	require.Equal(t, int64(1), took)
	require.False(t, emptied)
	// A readmit puts back what its unadmit took, into the same entry, or
	// re-inserts an entry it emptied while it is inside the window.
	k.newest = 20
	require.False(t, k.readmit(takenUnits{ref: 0, id: 1, units: 1}, 100))
	require.True(t, k.readmit(takenUnits{t: 10, ref: 10, id: 2, units: 5, emptied: true}, 100))
	require.Equal(t, int64(9), k.sum)
	require.Equal(t, []auditEntry{{t: 0, id: 1, n: 2}, {t: 10, id: 2, n: 5}, {t: 20, id: 3, n: 2}}, k.log[k.head:])
	require.False(t, k.readmit(takenUnits{t: 10, ref: 10, id: 2, units: 5, emptied: true}, 5), "left the window")
	require.Equal(t, 1, k.expire(0)) // the entry at 0 leaves
	require.Equal(t, int64(7), k.sum)
	took, _, _ = k.unadmit(0, 1, 1)
	require.Zero(t, took, "an entry that has left the window is not touched")
}

// TestAuditDrainsInBackground: without any Audit call, the engine's own
// goroutine drains the buffer, so a buffer smaller than the traffic over a
// long run drops nothing as long as each drain period fits in it.
func TestAuditDrainsInBackground(t *testing.T) {
	e, err := New(Config{Limit: 1 << 30, Window: time.Second, Audit: 1, AuditBuffer: MinAuditBuffer, DisableEviction: true})
	require.NoError(t, err)
	defer e.Close()
	t0 := time.Unix(1_700_000_000, 0)
	deadline := time.Now().Add(10 * time.Second)
	const batch = MinAuditBuffer - MinAuditBuffer/8 // decisions' share of the buffer
	for i := 0; ; i++ {
		e.AllowAt(fmt.Sprint(i%8), 1, t0)
		if i%batch == batch-1 {
			// Wait until the background drain has emptied the buffer.
			for e.audit.ring.tail.Load() != func() uint64 { e.audit.mu.Lock(); defer e.audit.mu.Unlock(); return e.audit.ring.head }() {
				if time.Now().After(deadline) {
					t.Fatal("the background drain did not run")
				}
				runtime.Gosched() // the drain runs on a real ticker; no sleep
			}
			if i >= 4*batch {
				break
			}
		}
	}
	r := e.Audit()
	require.Zero(t, r.Dropped)
	require.Equal(t, int64(5*batch), r.Decisions)
}

// TestShadowKeyGivesMemoryBack: a log that held a burst shrinks once the
// burst has left the window, so its capacity stays within 4× its live
// entries plus shadowSlack.
func TestShadowKeyGivesMemoryBack(t *testing.T) {
	k := &shadowKey{}
	for i := range 10_000 {
		k.log = append(k.log, auditEntry{t: int64(i), id: uint64(i + 1), n: 1})
		k.sum++
	}
	require.Equal(t, 9_990, k.expire(9_989))
	require.Equal(t, 10, len(k.log)-k.head)
	require.LessOrEqual(t, cap(k.log), 4*10+shadowSlack)
	require.Equal(t, int64(10), k.sum)
	require.Equal(t, int64(9_990), k.log[k.head].t)
	// Steady traffic keeps amortised O(1) work: one entry in, one out.
	for i := 10_000; i < 100_000; i++ {
		k.log = append(k.log, auditEntry{t: int64(i), id: uint64(i + 1), n: 1})
		k.sum++
		k.expire(int64(i) - 10)
		require.LessOrEqual(t, cap(k.log), 4*10+shadowSlack)
	}
	require.Equal(t, int64(10), k.sum)
}

// TestAuditLateDecision: a decision buffered after a drain replayed a later
// sub-window of its key (its goroutine preempted between deciding and
// buffering) is replayed but not judged; one in the same sub-window, or
// in order, is judged.
func TestAuditLateDecision(t *testing.T) {
	e, err := New(Config{Limit: 2, Window: time.Second, SubWindows: 10, Algorithm: SlidingWindowStrict, Audit: 1, DisableEviction: true})
	require.NoError(t, err)
	require.NoError(t, e.Close()) // no background drain: the test orders the drains
	base := time.Unix(1_700_000_000, 0).UnixNano()
	ms := func(n int64) int64 { return base + n*int64(time.Millisecond) }
	e.audit.record("k", ms(520), 1, 2, true) // sub-window 5
	e.audit.record("k", ms(510), 1, 2, true) // same sub-window, out of order
	e.Audit()
	e.audit.record("k", ms(350), 1, 2, true) // sub-window 3, after 5 was replayed
	r := e.Audit()
	require.Equal(t, int64(3), r.Decisions)
	require.Equal(t, int64(2), r.Judged)
	require.Equal(t, int64(1), r.Unjudged)
	require.Zero(t, r.FalseAdmits, "the late admission would have counted 3 > 2")
	require.Equal(t, int64(3), r.Entries, "its unit is in the log all the same")
	// At its own time (350 ms), where the engine counted it: at 1.4 s it has
	// left the window (0.4 s, 1.4 s], the two at 510 and 520 ms have not.
	// Placed at the newest time (520 ms) it would still count: 3 > 2.
	e.audit.record("k", ms(1400), 0, 2, true) // n = 0 only to observe C; the engine never records it
	r = e.Audit()
	require.Zero(t, r.FalseAdmits)
	require.Equal(t, int64(3), r.Entries, "510, 520 and the empty one at 1.4 s")
	// An admission far older than the window is out of it at once.
	e.audit.record("k", ms(300), 1, 2, true)
	r = e.Audit()
	require.Equal(t, int64(3), r.Entries)
	require.Equal(t, int64(2), r.Unjudged)
}

// TestAuditUnadmitConcurrent: goroutines admit and take back their own
// admissions while others drain; every unadmit finds its admission, and
// every log ends empty of units.
func TestAuditUnadmitConcurrent(t *testing.T) {
	e, err := New(Config{Limit: 1 << 20, Window: time.Hour, Audit: 1, DisableEviction: true, AuditBuffer: 1 << 16})
	require.NoError(t, err)
	defer e.Close()
	base := time.Unix(1_700_000_000, 0)
	const workers, each = 4, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			key := fmt.Sprint("k", w)
			for i := range each {
				at := base.Add(time.Duration(i) * time.Millisecond)
				n := int64(1 + i%3)
				r := e.ReserveAt(key, n, at)
				if !r.Decision().Allowed {
					t.Error("refused")
					return
				}
				e.audit.takeBackAt(key, r.audit-1, r.auditID, n, at.UnixNano())
				if i%100 == 0 {
					e.Audit()
				}
			}
		})
	}
	wg.Wait()
	r := e.Audit()
	require.Zero(t, r.Dropped)
	require.Equal(t, int64(workers*each), r.Unadmits)
	require.Zero(t, r.UnadmitMissed)
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	for key, k := range e.audit.keys {
		require.Zero(t, k.sum, key)
	}
}

// A Cancel whose take-back finds even Cancel's share of the buffer full is
// dropped: its units stay in the log, and the quarantine must last until
// they leave it. The unit sits at the key's newest decision time, past the
// start of the sub-window the unadmit is timed at, so the quarantine runs
// one window past that sub-window's end (it once gave a Strict
// false admit when it ran one window past the start).
func TestAuditDroppedTakeBackQuarantine(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindowStrict, SlidingLog} {
		e, err := New(Config{Limit: 2, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, AuditBuffer: 64, DisableEviction: true})
		require.NoError(t, err)
		require.NoError(t, e.Close()) // no background drain: the test fills the buffer
		base := time.Unix(1_700_000_000, 0)
		at := func(us int) time.Time { return base.Add(time.Duration(us) * time.Microsecond) }
		require.True(t, e.AllowAt("a", 1, at(5_000_000)).Allowed)
		require.False(t, e.AllowAt("a", 2, at(5_656_600)).Allowed)
		e.Audit()
		r := e.ReserveAt("a", 1, at(5_335_000))
		require.True(t, r.Decision().Allowed)
		// Fill every cell, Cancel's share too, with events that replay as
		// nothing (settling an unadmit that never was, of a key with no log).
		for {
			if _, ok := e.audit.ring.push(auditEvent{key: "zz", kind: evKept, id: 1 << 60}, 0); !ok {
				break
			}
		}
		dropped := e.audit.dropped.Load() // not Audit: it would drain
		require.True(t, r.Cancel())
		require.Equal(t, dropped+1, e.audit.dropped.Load(), "the unadmit was dropped (and so no settling event sent)")
		e.Audit() // empties the buffer
		require.True(t, e.AllowAt("a", 2, at(6_643_500)).Allowed)
		rep := e.Audit()
		require.Equal(t, dropped+1, rep.Dropped, "the admission at 6.6435 s was buffered")
		require.Zero(t, rep.FalseAdmits, "%v: %+v", alg, rep)
	}
}

// A readmit whose key's log was dropped between its unadmit and it (two
// idle windows, pruned at the end of a drain) puts nothing anywhere: the
// stand-in for a dropped log is shared by every key and engine, and is
// never written.
func TestAuditReadmitWithoutLog(t *testing.T) {
	e, err := New(Config{Limit: 10, Window: time.Second, Audit: 1, DisableEviction: true})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	a := e.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	a.taken[7] = takenUnits{t: 5, ref: 5, units: 3, id: 1, emptied: true}
	a.replay(&auditEvent{key: "gone", t: 6, ref: 5, n: 3, id: 7, kind: evReadmit}, quarantine{})
	require.Empty(t, noLog.log)
	require.Zero(t, noLog.sum)
	require.Zero(t, a.entries)
	require.NotContains(t, a.taken, uint64(7))
}
