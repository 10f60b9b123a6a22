package engine_test

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// slabThreshold is shard.slabFromKeys: the keys present at which a table
// starts its home slab; a sweep that leaves fewer than half drops it.
const slabThreshold = 1<<17 - 1

// hotKeys returns n keys of lengths around a slot's: a quarter short, a
// quarter of exactly 15 and 16 bytes (the most a default slot holds, and
// one more), a quarter longer than any slot (states of their own).
func hotKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		k := prefix + strconv.Itoa(i)
		switch i % 4 {
		case 1:
			k = fmt.Sprintf("%s-a-key-longer-than-any-slot-%03d", prefix, i)
		case 2:
			k = fmt.Sprintf("%-15s", k)
		case 3:
			k = fmt.Sprintf("%-16s", k)
		}
		keys[i] = k
	}
	return keys
}

// tally counts one key's units admitted and given back, from many
// goroutines.
type tally struct{ admitted, cancelled atomic.Int64 }

func (c *tally) net() int64 { return c.admitted.Load() - c.cancelled.Load() }

// decideHot runs AllowAt(k, 1, at) and ReserveAt(k, 1, at) then Cancel on
// keys until stop is closed, recording admissions in tallies, and checks
// each decision's Remaining and RetryAfter against the key's limit: at one
// instant a Strict key's denial waits at most a window and a sub-window
// (2 s bounds it here; settleHot checks it exactly), and an admission
// leaves at most limit−1.
func decideHot(t *testing.T, e *engine.Engine, keys []string, tallies []*tally, limit func(string) int64, at time.Time, seed int, stop <-chan struct{}) {
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		default:
		}
		runtime.Gosched() // leave the table's writer its share of two cores
		for j := range keys {
			i := (j + seed + round) % len(keys)
			k, lim := keys[i], limit(keys[i])
			if round%3 == seed%3 {
				r := e.ReserveAt(k, 1, at)
				d := r.Decision()
				if !d.Allowed {
					if d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Second {
						t.Errorf("%s: refused reservation %+v", k, d)
					}
					continue
				}
				tallies[i].admitted.Add(1)
				if !r.Cancel() {
					t.Errorf("%s: Cancel of an admitted reservation gave nothing back", k)
				} else {
					tallies[i].cancelled.Add(1)
				}
				if r.Cancel() {
					t.Errorf("%s: a second Cancel gave units back again", k)
				}
				continue
			}
			d := e.AllowAt(k, 1, at)
			switch {
			case d.Allowed:
				tallies[i].admitted.Add(1)
				if d.Remaining < 0 || d.Remaining > lim-1 || d.Limit != lim {
					t.Errorf("%s: admitted with %+v, limit %d", k, d, lim)
				}
			case d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Second:
				t.Errorf("%s: refused with %+v", k, d)
			}
		}
	}
}

// settleHot checks, once nothing else decides, that each key's units
// admitted and not given back are what the engine holds: a peek reports
// limit − net, and exactly that many more units are admitted at the same
// instant, then none.
func settleHot(t *testing.T, e *engine.Engine, keys []string, tallies []*tally, limit func(string) int64, at time.Time) {
	t.Helper()
	for i, k := range keys {
		lim, net := limit(k), tallies[i].net()
		if net > lim {
			t.Errorf("%s: %d units admitted at one instant, limit %d", k, net, lim)
			continue
		}
		if d := e.AllowAt(k, 0, at); d.Remaining != lim-net {
			t.Errorf("%s: Remaining %d after %d admitted net (limit %d): counts lost or doubled", k, d.Remaining, net, lim)
			continue
		}
		if lim > net {
			if d := e.AllowAt(k, lim-net, at); !d.Allowed || d.Remaining != 0 {
				t.Errorf("%s: the last %d units refused: %+v", k, lim-net, d)
			}
		}
		d := e.AllowAt(k, 1, at)
		if d.Allowed {
			t.Errorf("%s: admitted over its limit %d: %+v", k, lim, d)
			continue
		}
		// RetryAfter is exact: a unit does not fit a nanosecond before it,
		// and fits at it (peeks, which record nothing).
		if p := e.AllowAt(k, 0, at.Add(d.RetryAfter-1)); p.Remaining != 0 {
			t.Errorf("%s: RetryAfter %v, but %d units fit 1 ns before", k, d.RetryAfter, p.Remaining)
		}
		if p := e.AllowAt(k, 0, at.Add(d.RetryAfter)); p.Remaining < 1 {
			t.Errorf("%s: RetryAfter %v, but nothing fits then: %+v", k, d.RetryAfter, p)
		}
	}
}

// newThresholdEngine returns a SlidingWindowStrict engine whose table keeps
// the default slab threshold, on a manual clock at now.
func newThresholdEngine(t *testing.T, cfg engine.Config, now time.Time) (*engine.Engine, *engine.ManualClock) {
	t.Helper()
	cfg.Algorithm = engine.SlidingWindowStrict
	return newThresholdEngineOf(t, cfg, now)
}

// newThresholdEngineOf is newThresholdEngine with cfg's Algorithm.
func newThresholdEngineOf(t *testing.T, cfg engine.Config, now time.Time) (*engine.Engine, *engine.ManualClock) {
	t.Helper()
	restore := engine.KeepSlabThreshold()
	defer restore()
	clk := engine.NewManualClock(now)
	cfg.Window, cfg.Clock, cfg.SweepInterval = time.Second, clk, time.Hour
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if e.SlabGen() != 0 {
		t.Fatal("a new engine's table has a slab before any key")
	}
	return e, clk
}

// createKeys creates keys prefix0 … prefix(n−1) at at, one unit each, all
// admitted.
func createKeys(t *testing.T, e *engine.Engine, prefix string, from, to int, at time.Time) {
	for i := from; i < to; i++ {
		if d := e.AllowAt(prefix+strconv.Itoa(i), 1, at); !d.Allowed {
			t.Errorf("new key %s%d refused: %+v", prefix, i, d)
			return
		}
	}
}

// Crossing the threshold upward while goroutines decide, reserve and
// cancel on keys that exist (short and long, created before the slab):
// each key admits exactly its limit at one instant, and every key created
// just before and after the slab started keeps its count.
func TestSlabStartWhileDeciding(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	const lim = 50
	e, _ := newThresholdEngine(t, engine.Config{Limit: lim}, now)
	limit := func(string) int64 { return lim }
	keys := append(hotKeys("hot", 16), "") // the empty key has no slot head
	tallies := newTallies(len(keys))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); decideHot(t, e, keys, tallies, limit, now, w, stop) }()
	}
	createKeys(t, e, "f", 0, slabThreshold+2000, now)
	close(stop)
	wg.Wait()
	if e.SlabGen() == 0 {
		t.Fatalf("no slab at %d keys", e.Len())
	}
	if got, want := e.Len(), int64(slabThreshold+2000+len(keys)); got != want {
		t.Errorf("Len %d, want %d", got, want)
	}
	settleHot(t, e, keys, tallies, limit, now)
	// Keys created around the start, and a sample of the rest: each holds
	// the one unit it was created with.
	for i := 0; i < slabThreshold+2000; i++ {
		if i%97 != 0 && (i < slabThreshold-2*len(keys)-200 || i > slabThreshold+200) {
			continue
		}
		k := "f" + strconv.Itoa(i)
		if d := e.AllowAt(k, lim-1, now); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: its last %d units refused: %+v", k, lim-1, d)
		}
		if d := e.AllowAt(k, 1, now); d.Allowed {
			t.Fatalf("%s: admitted over its limit: %+v", k, d)
		}
	}
}
