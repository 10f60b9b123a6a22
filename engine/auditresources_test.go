package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// TestAuditOverflow: with the background drain stopped (Close), a buffer
// of 64 takes 56 decisions (the last eighth is Cancel's) and counts the
// rest as dropped; the window
// after the dropped decisions is not judged, the decisions before them are.
func TestAuditOverflow(t *testing.T) {
	e, err := engine.New(engine.Config{Limit: 1000, Window: time.Second, Audit: 1, AuditBuffer: 64, DisableEviction: true})
	require.NoError(t, err)
	require.NoError(t, e.Close()) // no background drain from here on
	for i := range 200 {
		require.True(t, e.AllowAt("k", 1, t0.Add(time.Duration(i)*time.Millisecond)).Allowed)
	}
	r := e.Audit()
	require.Equal(t, int64(144), r.Dropped)
	require.Equal(t, int64(56), r.Decisions)
	require.Equal(t, int64(56), r.Judged, "decisions before the first dropped one are judged")
	// Dropped from 56 ms to 199 ms: decisions before 1.199 s are not judged.
	for _, ms := range []int{300, 1198, 1199, 1500} {
		e.AllowAt("k", 1, t0.Add(time.Duration(ms)*time.Millisecond))
	}
	r = e.Audit()
	require.Equal(t, int64(60), r.Decisions)
	require.Equal(t, int64(2), r.Unjudged)
	require.Equal(t, int64(58), r.Judged)
	require.Zero(t, r.FalseAdmits+r.FalseDenies)
}

// TestAuditBoundedMemory: AuditMaxKeys caps the logs, and a key refused a
// log is not given one until its unlogged units have left the window;
// AuditMaxEntries caps the entries, and a key that would pass it loses its
// log for a window.
func TestAuditBoundedMemory(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 100, Window: time.Second, Audit: 1, AuditMaxKeys: 2, AuditMaxEntries: 10, DisableEviction: true})
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, k := range []string{"a", "b", "c", "d"} {
		e.AllowAt(k, 1, at(0))
	}
	r := e.Audit()
	require.Equal(t, 2, r.Keys)
	require.Equal(t, int64(2), r.KeysSkipped)
	require.Equal(t, int64(2), r.Skipped)
	require.Equal(t, int64(2), r.Decisions)
	// c is still refused while its unlogged unit is in the window, even
	// with room for it.
	e.AllowAt("a", 1, at(1100)) // a's first unit leaves; no room is made yet
	e.AllowAt("c", 1, at(500))
	r = e.Audit()
	require.Equal(t, int64(3), r.Skipped)
	// At 3.2 s a and b are idle for two windows: their logs go (the
	// audit keeps an idle log one window longer than needed), and c,
	// whose skip record ended at 1.5 s, gets one.
	e.AllowAt("c", 1, at(3200))
	r = e.Audit()
	require.Equal(t, int64(4), r.Decisions)
	require.Equal(t, int64(4), r.Judged)
	require.Equal(t, 1, r.Keys)
	// 10 entries at most: c's tenth unit in one window fits, the eleventh
	// drops c's log.
	for i := 1; i <= 9; i++ {
		e.AllowAt("c", 1, at(3200+i))
	}
	r = e.Audit()
	require.Equal(t, int64(10), r.Entries)
	require.Equal(t, 1, r.Keys)
	e.AllowAt("c", 1, at(3210))
	r = e.Audit()
	require.Zero(t, r.Entries)
	require.Equal(t, int64(14), r.Decisions)
	require.Equal(t, 0, r.Keys)
	require.Equal(t, int64(3), r.KeysSkipped)
	e.AllowAt("c", 1, at(3300)) // inside the window of the lost log: skipped
	e.AllowAt("c", 1, at(4300)) // after it: a new log, judged
	r = e.Audit()
	require.Equal(t, int64(4), r.Skipped)
	require.Equal(t, int64(15), r.Decisions)
	require.Equal(t, int64(15), r.Judged)
	require.Equal(t, int64(1), r.Entries)
}

// TestAuditHugeKeyCount: many more sampled keys than AuditMaxKeys, each
// making a decision, keep the logs at the cap.
func TestAuditHugeKeyCount(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Audit: 1, AuditMaxKeys: 100, DisableEviction: true})
	for i := range 20_000 {
		e.AllowAt(fmt.Sprint("k", i), 1, t0)
		if i%1000 == 0 {
			require.LessOrEqual(t, e.Audit().Keys, 100)
		}
	}
	r := e.Audit()
	require.Equal(t, 100, r.Keys)
	require.Equal(t, int64(100), r.Entries)
	require.Equal(t, int64(100), r.Decisions)
	require.Equal(t, int64(19_900), r.Skipped)
	// Each key kept out is counted once while the audit can remember it:
	// max(AuditMaxKeys, 4096) keys; beyond that KeysSkipped is a lower
	// bound (it once counted decisions instead, an over-count).
	require.Equal(t, int64(4096), r.KeysSkipped)
}

// TestAuditAllocatesNothing: the decision path of an unsampled key and of a
// sampled one allocates nothing with the audit on.
func TestAuditAllocatesNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		e := newEngine(t, engine.Config{Limit: 1000, Window: time.Second, Algorithm: alg, Audit: 0.5, DisableEviction: true})
		// No background drain: AllocsPerRun counts every goroutine's
		// allocations, and a drain's (a shadow log growing or giving
		// memory back) depends on when it runs, which made this test fail
		// on a loaded machine. The buffer holds the 2,000 events; the
		// decision path is what is measured.
		e.Close()
		var sampled, unsampled string
		for i := 0; sampled == "" || unsampled == ""; i++ {
			k := fmt.Sprint("key-", i)
			if e.Audited(k) {
				sampled = k
			} else {
				unsampled = k
			}
		}
		for _, key := range []string{sampled, unsampled} {
			e.AllowAt(key, 1, t0)
			now := t0
			allocs := testing.AllocsPerRun(200, func() {
				now = now.Add(time.Millisecond)
				e.AllowAt(key, 1, now)
				e.AllowN(key, 1)
				e.Allow(key)
				r := e.ReserveAt(key, 1, now)
				r.Cancel()
			})
			require.Zero(t, allocs, "alg %v, sampled %v", alg, e.Audited(key))
		}
	}
}

// TestAuditGoroutineStopsOnClose: with DisableEviction the engine starts a
// goroutine only for the audit's drain, and Close stops it; without Audit
// it starts none.
func TestAuditGoroutineStopsOnClose(t *testing.T) {
	e, err := engine.New(engine.Config{Limit: 5, Window: time.Second, Audit: 1, DisableEviction: true})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	off, err := engine.New(engine.Config{Limit: 5, Window: time.Second, DisableEviction: true})
	require.NoError(t, err)
	t.Cleanup(func() { off.Close() })
	drainer := fmt.Sprintf("engine.(*Engine).sweeper(%p", e)
	requireStacks(t, drainer, true)
	requireStacks(t, fmt.Sprintf("engine.(*Engine).sweeper(%p", off), false)
	e.AllowAt("k", 1, t0)
	require.NoError(t, e.Close())
	requireStacks(t, drainer, false)
	// Decisions and Audit still work after Close.
	e.AllowAt("k", 1, t0)
	require.Equal(t, int64(2), e.Audit().Decisions)
}
