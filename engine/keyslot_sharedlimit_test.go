package engine_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Keys under the engine's shared limit (no PerKeyLimits, no KeyLimit) are
// decided by the ring's register-only fast path whenever a request falls
// in the key's newest sub-window, and most of them live in the home slab.
// The table's other churn tests give every key its own limit, which keeps
// them off that path; these run the two together.
//
// Owners decide disjoint sets of keys concurrently (so each key's history
// is sequential and its exact model, model_test.go, tells every Decision),
// while another goroutine sweeps without pause and the table grows through
// slab generations, shrinks after idle stretches, and takes keys back.
// Every key of every length around the slot's sizes, binary bytes
// included, is checked on every call: Allow, AllowN on the engine's clock,
// AllowAt at now or up to a sub-window behind it (a clamp when the key was
// active later), n of −1, 0, 1 … Limit and Limit+1, Reset, and one jump of
// more than 2^21 sub-windows, which retires every ring it finds. A count
// taken from another key's state, from a retired ring or from an older
// generation shows as a wrong Remaining or a wrong verdict. Two of the
// geometries run again with Config.ExpectedKeys.
func TestSharedLimitKeysMatchTheirModelsUnderChurn(t *testing.T) {
	geos := []engine.Config{
		{Algorithm: engine.SlidingWindow, Limit: 6, Window: time.Second},
		{Algorithm: engine.SlidingWindow, Limit: 5, Window: 300 * time.Millisecond, SubWindows: 3},
		{Algorithm: engine.SlidingWindow, Limit: 4, Window: time.Second, SubWindows: 1},
		{Algorithm: engine.SlidingWindow, Limit: engine.MaxLimit, Window: 2 * time.Second, SubWindows: 2},
		{Algorithm: engine.SlidingWindowStrict, Limit: 5, Window: 400 * time.Millisecond, SubWindows: 4},
		{Algorithm: engine.SlidingWindowStrict, Limit: 1, Window: time.Second, SubWindows: 1},
		{Algorithm: engine.FixedWindow, Limit: 3, Window: 250 * time.Millisecond},
		{Algorithm: engine.SlidingWindow, Limit: 9, Window: 700 * time.Millisecond, SubWindows: 7},
	}
	rounds, extra := scaled(40, 200), scaled(2500, 20000)
	if raceOn && !longRun() {
		rounds, extra = 16, 300 // under -race, seconds
	}
	keys := sharedLimitKeys(extra)
	for _, g := range geos {
		name := fmt.Sprintf("%s/n%d/L%d", g.Algorithm, g.SubWindows, g.Limit)
		t.Run(name, func(t *testing.T) { sharedLimitChurn(t, g, keys, rounds) })
	}
	// And in a table presized for half the keys: its slab from the start,
	// kept through the sweeps, and a new one as the keys outgrow it.
	for _, g := range []engine.Config{geos[0], geos[4]} {
		g.ExpectedKeys = int64(len(keys) / 2)
		name := fmt.Sprintf("%s/n%d/L%d/expected", g.Algorithm, g.SubWindows, g.Limit)
		t.Run(name, func(t *testing.T) { sharedLimitChurn(t, g, keys, rounds) })
	}
}

// sharedLimitKeys returns keys of lengths 0 … 300 around the slot's sizes
// (a 7-byte head; the longest key a slot holds is 15, 23, 31, 39, 47 or 71
// bytes in the geometries above, never above 127), with twins that differ in one byte at the start, past the head or
// at the end, binary bytes (0x00, 0x80, 0xff), and extra numbered keys that
// take the table through slab generations.
func sharedLimitKeys(extra int) []string {
	var keys []string
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, n := range []int{0, 1, 2, 6, 7, 8, 9, 14, 15, 16, 17, 22, 23, 24, 30, 31, 32, 38, 39, 40, 46, 47, 48, 70, 71, 72, 73, 126, 127, 128, 129, 300} {
		for _, fill := range []string{"\x00", "\xff", "k"} {
			base := strings.Repeat(fill, n)
			add(base)
			for _, at := range []int{0, 7, 8, n - 1} {
				if at < 0 || at >= n {
					continue
				}
				for _, c := range []byte{0x00, 0x80, 'z'} {
					b := []byte(base)
					b[at] = c
					add(string(b))
				}
			}
		}
	}
	for i := range extra {
		add(fmt.Sprintf("s%06d", i))
	}
	return keys
}

func sharedLimitChurn(t *testing.T, cfg engine.Config, keys []string, rounds int) {
	const owners = 4
	clk := engine.NewManualClock(t0)
	cfg.Clock, cfg.SweepInterval, cfg.Shards = clk, time.Hour, 4
	e := newEngine(t, cfg)
	nc := e.Config()
	w := e.Width()
	idle := int64(max(nc.SubWindows, 1) + 2) // sub-windows idle at which a sweep may reclaim
	models := make([]*model, owners)
	for o := range models {
		models[o] = newModel(nc)
	}
	limits := []int64{-1, 0, 1, cfg.Limit, cfg.Limit + 1}
	if cfg.Limit > 2 {
		limits = append(limits, 2, cfg.Limit-1, cfg.Limit/2)
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Limit), uint64(nc.SubWindows)))
	now := t0.UnixNano()
	jumped := false
	var reclaimed int
	for r := range rounds {
		steps := []int64{0, 1, w / 3, w, 2 * w, idle * w, int64(nc.Window) * 3}
		now += steps[rng.IntN(len(steps))]
		if !jumped && r == rounds/2 {
			now += (1<<21 + 5) * w // every ring a writer finds is retired and replaced
			jumped = true
		}
		clk.Set(time.Unix(0, now))
		active := 0.9
		if r%8 >= 4 {
			active = 0.1 // most keys go idle, are swept, and the slab shrinks
		}
		stop := make(chan struct{})
		var sweeps sync.WaitGroup
		sweeps.Add(1)
		go func() {
			defer sweeps.Done()
			for {
				select {
				case <-stop:
					return
				default:
					e.Sweep()
				}
			}
		}()
		errs := make(chan error, owners)
		var wg sync.WaitGroup
		for o := range owners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := models[o]
				rng := rand.New(rand.NewPCG(uint64(r), uint64(o)))
				for i := o; i < len(keys); i += owners {
					if rng.Float64() >= active {
						continue
					}
					for range 1 + rng.IntN(3) {
						n := limits[rng.IntN(len(limits))]
						if err := sharedLimitStep(e, m, rng, keys[i], n, now, w, idle); err != nil {
							errs <- fmt.Errorf("round %d: %w", r, err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		sweeps.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		reclaimed = int(e.Stats().Evicted)
	}
	if reclaimed == 0 {
		t.Fatalf("no key was reclaimed in %d rounds: the test did not churn", rounds)
	}
	t.Logf("%d keys, %d rounds: %d reclaimed, %d held at the end", len(keys), rounds, reclaimed, e.Len())
}

// sharedLimitStep makes one call for key and checks it against the key's
// model. A key the engine surely holds (active within the last idle
// sub-windows: no sweep at the clock's time can reclaim it) is also asked
// about times up to three windows back, which it decides at the start of
// its newest sub-window; any other key only about times in the clock's own
// sub-window, at or after every shard's floor, where a key the sweep took
// and one it kept are decided alike (every count either held has left the
// window).
func sharedLimitStep(e *engine.Engine, m *model, rng *rand.Rand, key string, n, now, w, idle int64) error {
	short := fmt.Sprintf("len %d %q", len(key), key[:min(len(key), 12)])
	k := m.keys[key]
	held := k != nil && k.live && now/w-k.newest < idle
	switch op := rng.IntN(10); {
	case op == 0:
		want := m.reset(key)
		got := e.Reset(key)
		switch {
		case got == want:
		case held || !want:
			return fmt.Errorf("Reset(%s) = %v, want %v", short, got, want)
		default:
			k.live = false // reclaimed by a sweep: the model's reset dropped its counts alike
		}
		return nil
	case op == 1 && n == 1:
		got := e.Allow(key)
		if want := m.decide(key, 1, now); got != want.Allowed {
			return fmt.Errorf("Allow(%s) = %v at %d, model %+v", short, got, now, want)
		}
		return nil
	case op == 2:
		got, want := e.AllowN(key, n), m.decide(key, n, now)
		if got != want {
			return fmt.Errorf("AllowN(%s, %d) at %d = %+v, model %+v", short, n, now, got, want)
		}
		return nil
	}
	at := now
	switch {
	case rng.IntN(3) != 0:
	case held:
		at -= rng.Int64N(3 * int64(e.Window()))
	default:
		at -= rng.Int64N(now%w + 1)
	}
	if got, want := e.AllowAt(key, n, time.Unix(0, at)), m.decide(key, n, at); got != want {
		return fmt.Errorf("AllowAt(%s, %d) at %d (clock %d) = %+v, model %+v", short, n, at, now, got, want)
	}
	return nil
}
