package engine_test

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// newTallies returns n empty tallies.
func newTallies(n int) []*tally {
	ts := make([]*tally, n)
	for i := range ts {
		ts[i] = new(tally)
	}
	return ts
}

// A sweep that drops the slabs (fewer than half the threshold left) while
// goroutines decide on the keys left, hold reservations across the drop
// and cancel or settle them after, Reset keys and set their limits; then
// the table grows past the threshold again (a new slab), and a second
// sweep drops that one. At each instant every key admits exactly its
// limit, a Cancel or Settle gives back its units once, an override
// survives, and a key whose ring is in a dropped slab has one ring after a
// Reset gives it a fresh state, never confused with the old.
func TestSlabDropAndRestartUnderUse(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	keyLimit := func(k string) int64 { return 20 + int64(len(k)%7) }
	e, clk := newThresholdEngine(t, engine.Config{Limit: 30, KeyLimit: keyLimit}, t0)
	const override = 9
	limKeys := []string{"lim0", "lim1-a-key-longer-than-any-slot"}
	limit := func(k string) int64 {
		for _, l := range limKeys {
			if k == l {
				return override
			}
		}
		return keyLimit(k)
	}

	before := hotKeys("a", 8) // states of their own: created below the threshold
	for _, k := range before {
		e.AllowAt(k, 1, t0)
	}
	createKeys(t, e, "f", 0, slabThreshold, t0)
	gen1 := e.SlabGen()
	if gen1 == 0 {
		t.Fatalf("no slab at %d keys", e.Len())
	}
	after := hotKeys("b", 8) // the short ones in the slab
	for _, k := range after {
		e.AllowAt(k, 1, t0)
	}
	for _, k := range limKeys {
		if err := e.SetLimitAt(k, override, t0); err != nil {
			t.Fatal(err)
		}
	}
	resetKeys := hotKeys("r", 4)
	for _, k := range resetKeys {
		e.AllowAt(k, 1, t0)
	}
	hot := append(append(append([]string{}, before...), after...), limKeys...)

	// phase runs a sweep at at, with the hot keys active there, while
	// goroutines decide on them, Reset resetKeys and set limKeys' limit,
	// and reservations admitted before the sweep are cancelled after it.
	// grow, if positive, creates that many keys prefix… at at after the
	// sweep, still beside the deciders. It checks the hot keys' counts at
	// the end and returns the keys the sweep reclaimed.
	phase := func(at time.Time, grow int, prefix string) int {
		t.Helper()
		clk.Set(at)
		// A peek records nothing, so the sweep below also reclaims the
		// hot keys the deciders have not used at at yet, beside them.
		for _, k := range hot {
			e.AllowAt(k, 0, at)
		}
		for _, k := range limKeys {
			if err := e.SetLimitAt(k, override, at); err != nil {
				t.Fatal(err)
			}
		}
		tallies := newTallies(len(hot))
		var held []engine.Reservation
		var heldAt []int
		for i, k := range hot {
			if r := e.ReserveAt(k, 1, at); r.Decision().Allowed {
				tallies[i].admitted.Add(1)
				held, heldAt = append(held, r), append(heldAt, i)
			}
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); decideHot(t, e, hot, tallies, limit, at, w, stop) }()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched()
				for _, k := range resetKeys {
					e.Reset(k)
					if d := e.AllowAt(k, 1, at); !d.Allowed && d.RetryAfter <= 0 {
						t.Errorf("%s: %+v", k, d)
					}
				}
				for _, k := range limKeys {
					if err := e.SetLimitAt(k, override, at); err != nil {
						t.Errorf("SetLimitAt(%s): %v", k, err)
					}
				}
			}
		}()
		swept := e.Sweep()
		for j := range held {
			if j%2 == 1 { // Settle(0) is Cancel, and then Cancel changes nothing
				if _, err := held[j].SettleAt(0, at); err != nil {
					t.Errorf("%s: SettleAt(0) after the sweep: %v", held[j].Key(), err)
				} else {
					tallies[heldAt[j]].cancelled.Add(1)
				}
				if held[j].Cancel() {
					t.Errorf("%s: Cancel after Settle gave units back again", held[j].Key())
				}
				continue
			}
			if !held[j].Cancel() {
				t.Errorf("%s: Cancel after the sweep gave nothing back", held[j].Key())
			} else {
				tallies[heldAt[j]].cancelled.Add(1)
			}
		}
		if g := e.SlabGen(); slabDrops && g != 0 {
			t.Errorf("the sweep left %d keys, but the slabs were kept", e.Len())
		}
		if grow > 0 {
			createKeys(t, e, prefix, 0, grow, at)
		}
		close(stop)
		wg.Wait()
		settleHot(t, e, hot, tallies, limit, at)
		return swept
	}

	t1 := t0.Add(10 * time.Second)
	if n := phase(t1, slabThreshold, "g"); n < slabThreshold {
		t.Fatalf("the sweep reclaimed %d keys, want at least %d", n, slabThreshold)
	}
	gen2 := e.SlabGen()
	if gen2 == 0 || gen2 == gen1 {
		t.Fatalf("after growing past the threshold again: slab %#x, the dropped one %#x", gen2, gen1)
	}

	// The keys whose rings were in the dropped slab: Reset gives each a
	// fresh state at t1, which admits exactly its limit once more, and
	// Len counts it once.
	n := e.Len()
	for _, k := range after {
		if !e.Reset(k) {
			t.Fatalf("Reset(%s) found no state", k)
		}
		if d := e.AllowAt(k, limit(k), t1); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s built anew: its limit %d refused: %+v", k, limit(k), d)
		}
		if d := e.AllowAt(k, 1, t1); d.Allowed {
			t.Fatalf("%s built anew: admitted over its limit: %+v", k, d)
		}
	}
	if got := e.Len(); got != n {
		t.Fatalf("Len %d after Reset and rebuilding keys, want %d", got, n)
	}

	t2 := t1.Add(10 * time.Second)
	if n := phase(t2, 0, ""); n < slabThreshold {
		t.Fatalf("the second sweep reclaimed %d keys, want at least %d", n, slabThreshold)
	}
	if got, want := e.Len(), int64(len(hot)+len(resetKeys)); got > want || got < int64(len(hot)) {
		t.Fatalf("Len %d after the second sweep, want %d hot keys and at most %d reset ones", got, len(hot), len(resetKeys))
	}
}

// The slab starts, is dropped and starts again while a table grows past
// the threshold with new keys as sweeps reclaim the idle old ones, beside
// deciders on hot keys: renew and the drop race. Every new key keeps the
// unit it was created with, the hot keys admit exactly their limit, and
// Len counts each key left once.
func TestSlabStartRacesDrop(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const lim = 25
	e, clk := newThresholdEngine(t, engine.Config{Limit: lim}, t0)
	limit := func(string) int64 { return lim }
	createKeys(t, e, "old", 0, slabThreshold-100, t0)
	if slabDrops && e.SlabGen() != 0 {
		t.Fatalf("a slab below the threshold, at %d keys", e.Len())
	}
	t1 := t0.Add(10 * time.Second)
	clk.Set(t1)
	hot := hotKeys("hot", 8)
	tallies := newTallies(len(hot))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); decideHot(t, e, hot, tallies, limit, t1, 0, stop) }()
	var gens sync.Map // the slabs seen by the sweeper
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.Sweep()
			gens.Store(e.SlabGen(), true)
			runtime.Gosched()
		}
	}()
	const fresh = slabThreshold + 100
	createKeys(t, e, "new", 0, fresh, t1)
	close(stop)
	wg.Wait()
	e.Sweep()
	settleHot(t, e, hot, tallies, limit, t1)
	if got, want := e.Len(), int64(fresh+len(hot)); got != want {
		t.Fatalf("Len %d, want %d", got, want)
	}
	if slabDrops && e.SlabGen() == 0 {
		t.Fatalf("no slab at %d keys", e.Len())
	}
	for i := 0; i < fresh; i += 7 {
		k := "new" + strconv.Itoa(i)
		if d := e.AllowAt(k, lim-1, t1); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: its last %d units refused: %+v", k, lim-1, d)
		}
		if d := e.AllowAt(k, 1, t1); d.Allowed {
			t.Fatalf("%s: admitted over its limit: %+v", k, d)
		}
	}
	n := 0
	gens.Range(func(any, any) bool { n++; return true })
	t.Logf("slabs seen by the sweeper (0: none): %d", n)
}
