package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A flush's take over many keys lets go of the hybrid lock between chunks
// of takeChunk keys, so a decision never waits for the walk over every
// key: in each pause the lock is free, a local decision on a key taken
// already or not yet and an exact one on a new key go through, and the
// units they admit reach Redis by the next flush, none lost or doubled.
func TestFlushTakeLetsDecisionsIn(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	cfg := engine.Config{Limit: 1_000_000, Window: time.Hour, Algorithm: engine.SlidingWindowStrict}
	l := mustNew(t, c, cfg, WithHybrid(time.Second, 10), WithReplicas(1), withManual())
	var keys []string
	var admitted int64
	allow := func(key string, wantLocal bool) {
		t.Helper()
		before := l.Stats().LocalDecisions
		d, err := l.AllowN(ctx, key, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("AllowN(%q): %+v %v", key, d, err)
		}
		admitted++
		if local := l.Stats().LocalDecisions > before; local != wantLocal {
			t.Fatalf("AllowN(%q): local %v, want %v", key, local, wantLocal)
		}
	}
	const n = 3*takeChunk + 5
	for i := range n {
		key := "k" + strconv.Itoa(i)
		keys = append(keys, key)
		allow(key, false) // exact: the observation
		allow(key, true)  // local: pending
	}
	pauses := 0
	l.hyb.takePause = func() {
		pauses++
		if !l.hyb.mu.TryLock() {
			t.Fatalf("pause %d: the hybrid lock is held between chunks", pauses)
		}
		l.hyb.mu.Unlock()
		allow(keys[0], true)        // taken already: pending for the next flush
		allow(keys[n-pauses], true) // perhaps not taken yet
		fresh := "new" + strconv.Itoa(pauses)
		keys = append(keys, fresh)
		allow(fresh, false) // a new key: exact, recorded now
	}
	l.flushNow()
	l.hyb.takePause = nil
	if want := n / takeChunk; pauses != want {
		t.Fatalf("a take over %d keys paused %d times, want %d (one per %d keys)", n, pauses, want, takeChunk)
	}
	l.flushNow() // carries what the pauses admitted on keys taken before them
	if got := storedUnits(t, c, l, keys...); got != admitted {
		t.Fatalf("Redis holds %d units on the keys, the limiter admitted %d", got, admitted)
	}
	if st := l.Stats(); st.LostUnits != 0 || st.Failures != 0 {
		t.Fatalf("stats %+v", st)
	}
}
