package engine

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every key's hash is forced to one value (shard.Table.ForceHashMask), so
// one key is the primary map's resident and the others live in the
// fallback map. Writers on all keys race with two sweep loops and the
// background sweeper, cycle after cycle: at each cycle's time every key
// from the cycle before is idle and reclaimable, so reclamation and
// revival race with the writers. Each key has its own limit (KeyLimit).
// In every cycle each key must admit exactly its own limit: more is an
// over-admission, less means two keys shared a count (or a count survived
// its reclamation).
func TestForcedHashCollisionsNeverShareACount(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingWindowStrict, FixedWindow, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) { forcedCollisions(t, alg) })
	}
}

func forcedCollisions(t *testing.T, alg Algorithm) {
	const (
		keys    = 12
		workers = 6
		cycles  = 12
		window  = 100 * time.Millisecond
	)
	limitOf := func(i int) int64 { return 3 + int64(i%4) }
	keyName := func(i int) string { return "tenant-" + strconv.Itoa(i) }
	t0 := time.Unix(1_700_000_000, 0)
	clk := NewManualClock(t0)
	e, err := New(Config{
		Limit: 3, Window: window, SubWindows: 10, Algorithm: alg, Clock: clk,
		SweepInterval: time.Millisecond,
		KeyLimit: func(k string) int64 {
			i, _ := strconv.Atoi(k[len("tenant-"):])
			return limitOf(i)
		},
	})
	require.NoError(t, err)
	defer e.Close()
	e.tab.ForceHashMask(0)
	require.Equal(t, e.tab.Hash("a"), e.tab.Hash("b"))

	step := 3*window + 10*time.Millisecond // every key idle past Window + 2w (Fixed: 3W)
	for c := range cycles {
		at := t0.Add(time.Duration(c) * step)
		clk.Set(at)
		var admitted [keys]atomic.Int64
		var stop atomic.Bool
		var sweeps sync.WaitGroup
		for range 2 {
			sweeps.Add(1)
			go func() {
				defer sweeps.Done()
				for !stop.Load() {
					e.Sweep()
				}
			}()
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 40 * keys {
					i := (j + w) % keys
					if e.AllowAt(keyName(i), 1, at.Add(time.Duration(w)*time.Microsecond)).Allowed {
						admitted[i].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		stop.Store(true)
		sweeps.Wait()
		for i := range keys {
			require.Equal(t, limitOf(i), admitted[i].Load(), "cycle %d, %s: admitted %d, its limit is %d", c, keyName(i), admitted[i].Load(), limitOf(i))
		}
		require.Equal(t, int64(keys), e.Len(), "cycle %d", c)
	}
	// SetLimit on a colliding key changes that key alone.
	at := t0.Add(time.Duration(cycles) * step)
	clk.Set(at)
	require.NoError(t, e.SetLimitAt(keyName(1), 9, at))
	for i := range keys {
		want := limitOf(i)
		if i == 1 {
			want = 9
		}
		got := int64(0)
		for e.AllowAt(keyName(i), 1, at).Allowed {
			got++
		}
		require.Equal(t, want, got, fmt.Sprintf("%s after SetLimit on %s", keyName(i), keyName(1)))
	}
}

// Forced hash collisions: keys in the fallback map. Cancel (including a
// SlidingLog Cancel following a grown log) must act on its own key only,
// also after the primary resident was reclaimed.
func TestCollisionsCancel(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	W := time.Second
	for _, alg := range []Algorithm{SlidingWindow, SlidingWindowStrict, FixedWindow, SlidingLog} {
		clk := NewManualClock(t0)
		e, err := New(Config{Limit: 4, Window: W, SubWindows: 4, Algorithm: alg, Clock: clk, PerKeyLimits: true, SweepInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		e.tab.ForceHashMask(0)
		ra := e.ReserveAt("a", 2, t0)
		late := t0.Add(3 * W)
		clk.Set(late)
		rb := e.ReserveAt("b", 3, late)
		rc := e.ReserveAt("c", 1, late)
		if !ra.Decision().Allowed || !rb.Decision().Allowed || !rc.Decision().Allowed {
			t.Fatal("denied")
		}
		if alg == SlidingLog {
			if err := e.SetLimitAt("b", 40, late); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.Sweep(); n != 1 {
			t.Fatalf("%v: swept %d, want a only", alg, n)
		}
		if ra.Cancel() {
			t.Errorf("%v: cancel of reclaimed a true", alg)
		}
		if !rb.Cancel() {
			t.Errorf("%v: cancel of b (fallback map, primary reclaimed) false", alg)
		}
		wantB := int64(4)
		if alg == SlidingLog {
			wantB = 40
		}
		if rem := e.AllowAt("b", 0, late).Remaining; rem != wantB {
			t.Errorf("%v: b remaining %d want %d", alg, rem, wantB)
		}
		if rem := e.AllowAt("c", 0, late).Remaining; rem != 3 {
			t.Errorf("%v: c remaining %d want 3", alg, rem)
		}
		if !rc.Cancel() {
			t.Errorf("%v: cancel c false", alg)
		}
		if rem := e.AllowAt("c", 0, late).Remaining; rem != 4 {
			t.Errorf("%v: c remaining %d want 4", alg, rem)
		}
		// new a at late, then a reservation cancelled
		r2 := e.ReserveAt("a", 4, late)
		if !r2.Cancel() || e.AllowAt("a", 0, late).Remaining != 4 {
			t.Errorf("%v: new a", alg)
		}
		e.Close()
	}
}

func TestCollisionsLogGrowCancelStorm(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for round := 0; round < 20; round++ {
		e, err := New(Config{Limit: 4, Window: time.Hour, Algorithm: SlidingLog, PerKeyLimits: true, DisableEviction: true, MaxLogLimit: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		e.tab.ForceHashMask(0)
		keys := []string{"a", "b", "c"}
		done := make(chan struct{})
		lims := make([]int64, len(keys))
		kept := make([]int64, len(keys))
		var wgs [3]chan struct{}
		for i := range keys {
			wgs[i] = make(chan struct{})
			go func(i int) {
				defer close(wgs[i])
				for l := int64(8); l <= 2048; l *= 2 {
					if err := e.SetLimitAt(keys[i], l, t0); err != nil {
						t.Error(err)
					}
					lims[i] = l
				}
			}(i)
		}
		var ws [3]chan struct{}
		for i := range keys {
			ws[i] = make(chan struct{})
			go func(i int) {
				defer close(ws[i])
				for j := 0; j < 400; j++ {
					r := e.ReserveAt(keys[i], 1, t0)
					if r.Units() > 0 && !r.Cancel() {
						kept[i]++
					}
				}
			}(i)
		}
		for i := range keys {
			<-wgs[i]
			<-ws[i]
		}
		close(done)
		for i, k := range keys {
			rem := e.AllowAt(k, 0, t0).Remaining
			if lims[i]-rem != kept[i] || kept[i] != 0 {
				t.Fatalf("round %d key %s: holds %d, cancel false %d", round, k, lims[i]-rem, kept[i])
			}
		}
		e.Close()
	}
}
