package engine_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// rstep is one step of a reservation table at the fixed instant t0+at:
//   - 'r': ReserveAt(n); ok and rem are the Decision's Allowed and Remaining.
//     The reservation gets the next number, from 0.
//   - 'c': Cancel of reservation number n; ok is what Cancel returns, and
//     rem the Remaining of a peek (n = 0, which records nothing) at t0+at.
//   - 'p': a peek at t0+at; rem is its Remaining.
type rstep struct {
	at  time.Duration
	op  byte
	n   int64
	ok  bool
	rem int64
}

func runReserveSteps(t *testing.T, cfg engine.Config, steps []rstep) {
	t.Helper()
	cfg.DisableEviction = true
	e := newEngine(t, cfg)
	var res []engine.Reservation
	var newest int64 // the key's newest epoch (SlidingLog: time)
	for i, s := range steps {
		now := t0.Add(s.at)
		switch s.op {
		case 'r':
			res = append(res, e.ReserveAt("k", s.n, now))
			d := res[len(res)-1].Decision()
			require.Equal(t, s.ok, d.Allowed, "step %d (t0+%v, reserve %d): %+v", i, s.at, s.n, d)
			require.Equal(t, s.rem, d.Remaining, "step %d remaining: %+v", i, d)
			r := &res[len(res)-1]
			if s.ok && s.n > 0 {
				require.Equal(t, s.n, r.Units(), "step %d units", i)
				// Recorded in now's sub-window, or the key's newest when
				// now was older (the reference's clamp).
				w := e.Width()
				at := max(now.UnixNano()/w, newest) * w
				if cfg.Algorithm == engine.SlidingLog {
					at = max(now.UnixNano(), newest)
				}
				require.Equal(t, time.Unix(0, at), r.At(), "step %d: At", i)
			} else {
				require.Zero(t, r.Units(), "step %d units", i)
				require.True(t, r.At().IsZero(), "step %d: At", i)
			}
			if s.n >= 1 && s.n <= cfg.Limit {
				if cfg.Algorithm == engine.SlidingLog {
					newest = max(newest, now.UnixNano())
				} else {
					newest = max(newest, now.UnixNano()/e.Width())
				}
			}
		case 'c':
			got := res[s.n].Cancel()
			require.Equal(t, s.ok, got, "step %d (t0+%v): Cancel of #%d", i, s.at, s.n)
			d := e.AllowAt("k", 0, now)
			require.Equal(t, s.rem, d.Remaining, "step %d: Remaining after Cancel of #%d: %+v", i, s.n, d)
		case 'p':
			d := e.AllowAt("k", 0, now)
			require.Equal(t, s.rem, d.Remaining, "step %d (t0+%v): peek %+v", i, s.at, d)
		}
	}
}

// L=4, W=1s, N=2: sub-windows of 500 ms.
func TestReserveStepsWeighted(t *testing.T) {
	runReserveSteps(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2}, []rstep{
		{0, 'r', 3, true, 1},         // #0
		{100 * ms, 'c', 0, true, 4},  // back in its own sub-window
		{100 * ms, 'c', 0, false, 4}, // twice: nothing more
		{200 * ms, 'r', 4, true, 0},  // #1
		{200 * ms, 'r', 1, false, 0}, // #2, denied
		{200 * ms, 'c', 2, false, 0}, // a denied reservation returns nothing
		{200 * ms, 'r', 0, true, 0},  // #3, a peek
		{200 * ms, 'c', 3, false, 0}, // n = 0 returns nothing
		// Next sub-window: #1's 4 count in full. The denial publishes
		// epoch 1 and caches the 4 of epoch 0.
		{600 * ms, 'r', 1, false, 0}, // #4
		// Cancel after the sub-window boundary: epoch 0 is still inside
		// the key's window (N = 2), so the units go back to its slot and
		// the cache that counted them is invalidated.
		{600 * ms, 'c', 1, true, 4},
		{600 * ms, 'r', 4, true, 0}, // #5: the room is really there
		// Epoch 3: #5's epoch 1 is the weighted oldest, still inside.
		{1500 * ms, 'r', 1, false, 0}, // #6
		{1500 * ms, 'c', 5, true, 4},
		{1500 * ms, 'r', 2, true, 2}, // #7, epoch 3
		// Epoch 6: epoch 3 left the key's window (6 − N = 4).
		{3000 * ms, 'r', 1, true, 3}, // #8
		{3000 * ms, 'c', 7, false, 3},
		{3000 * ms, 'c', 8, true, 4},
		// Clamped reservation: a now behind the key's sub-window is
		// recorded in that sub-window, and cancelled from it.
		{2000 * ms, 'r', 3, true, 1}, // #9, at epoch 6 (t0+3s)
		{3000 * ms, 'c', 9, true, 4},
	})
}

func TestReserveStepsStrict(t *testing.T) {
	runReserveSteps(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2, Algorithm: engine.SlidingWindowStrict}, []rstep{
		{0, 'r', 3, true, 1},
		{100 * ms, 'c', 0, true, 4},
		{100 * ms, 'c', 0, false, 4},
		{200 * ms, 'r', 4, true, 0},   // #1
		{200 * ms, 'r', 1, false, 0},  // #2
		{200 * ms, 'c', 2, false, 0},  // denied
		{1000 * ms, 'r', 1, false, 0}, // #3: epoch 2 still counts epoch 0
		{1000 * ms, 'c', 1, true, 4},  // epoch 0 ≥ 2 − N
		{1000 * ms, 'r', 4, true, 0},  // #4, epoch 2: the cache was invalidated
		{2500 * ms, 'r', 1, true, 3},  // #5, epoch 5: epoch 2 has left
		{2500 * ms, 'c', 4, false, 3},
	})
}

func TestReserveStepsFixed(t *testing.T) {
	runReserveSteps(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.FixedWindow}, []rstep{
		{0, 'r', 3, true, 1},
		{999 * ms, 'c', 0, true, 4},
		{999 * ms, 'c', 0, false, 4},
		{999 * ms, 'r', 4, true, 0},  // #1
		{1000 * ms, 'r', 1, true, 3}, // #2: the next window
		{1000 * ms, 'c', 1, false, 3},
		{1000 * ms, 'c', 2, true, 4},
	})
}

// The log removes exactly the reserved timestamps: the peeks at the end
// tell which units are left by when they leave the window.
func TestReserveStepsLog(t *testing.T) {
	runReserveSteps(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.SlidingLog}, []rstep{
		{0, 'r', 2, true, 2},          // #0 at 0
		{100 * ms, 'r', 2, true, 0},   // #1 at 100ms
		{500 * ms, 'c', 0, true, 2},   // the units at 0 go
		{500 * ms, 'c', 0, false, 2},  // and only once
		{1050 * ms, 'p', 0, false, 2}, // #1's units are still inside
		{1099 * ms, 'r', 2, true, 0},  // #2 at 1.099s
		{1100 * ms, 'r', 1, true, 1},  // #3 at 1.1s: 100ms's units have left
		{1100 * ms, 'c', 1, false, 1}, // 100ms ≤ 1.1s − W: #1 has left the window
		{1200 * ms, 'r', 1, true, 0},  // #4 at 1.2s
		// From the middle of the log (the units after the run move),
		// then from its start (the units before it move: none).
		{1300 * ms, 'c', 3, true, 1},
		{1300 * ms, 'c', 2, true, 3},
		{1300 * ms, 'r', 2, true, 1}, // #5: left are 1.2s ×1, 1.3s ×2
		{2150 * ms, 'p', 0, false, 1},
		{2250 * ms, 'p', 0, false, 2}, // 1.2s's unit left: it was not cancelled instead
		{2299 * ms, 'p', 0, false, 2},
		{2300 * ms, 'p', 0, false, 4},
		// The key's newest time is still 1.3s (peeks record nothing), so
		// #5 is inside the key's window and Cancel returns it.
		{2300 * ms, 'c', 5, true, 4},
	})
}

// Reserve decides exactly as AllowAt: the same script through both.
func TestReserveDecidesAsAllowAt(t *testing.T) {
	for _, alg := range allAlgorithms {
		cfg := engine.Config{Limit: 7, Window: time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true}
		a, b := newEngine(t, cfg), newEngine(t, cfg)
		rng := rand.New(rand.NewPCG(3, uint64(alg)))
		now := t0
		for i := range 3000 {
			now = now.Add(time.Duration(rng.Int64N(int64(200*ms))) - 20*ms)
			key := []string{"x", "y"}[rng.IntN(2)]
			n := rng.Int64N(10) - 1
			r := b.ReserveAt(key, n, now)
			require.Equal(t, a.AllowAt(key, n, now), r.Decision(), "%v step %d", alg, i)
		}
	}
}

// rop is a step of a reserve/cancel script: cancel > 0 cancels reservation
// cancel−1 (modulo the count so far); settle > 0 settles it to actual;
// charge charges n of key; reset resets key (Engine.Reset); otherwise, with
// all set, it is AllowAll of n of key and 1 of all; otherwise it reserves n
// of key.
type rop struct {
	op
	cancel int
	all    string
	settle int
	actual int64
	charge bool
	reset  bool
}

// runReserveScript replays ops through ReserveAt/Cancel and the reference,
// comparing every Decision and every Cancel, and then the bounds of the
// true count once cancellations are subtracted.
func runReserveScript(t testing.TB, cfg engine.Config, ops []rop) {
	t.Helper()
	cfg.DisableEviction = true
	e, err := engine.New(cfg)
	require.NoError(t, err)
	defer e.Close()
	ref := newModel(cfg)
	now := t0
	var got []engine.Reservation
	var want []modelRes
	for i, o := range ops {
		now = now.Add(o.dt)
		if o.cancel > 0 && len(got) > 0 {
			j := (o.cancel - 1) % len(got)
			g, w := got[j].Cancel(), ref.cancel(want[j])
			if g != w {
				t.Fatalf("step %d: Cancel of #%d (%q at t0%+v): got %v, want %v", i, j, want[j].key, now.Sub(t0), g, w)
			}
			continue
		}
		if o.settle > 0 || o.charge {
			stepSettleOrCharge(t, i, e, ref, now, o, got, want)
			continue
		}
		if o.reset {
			if g, w := e.Reset(o.key), ref.reset(o.key); g != w {
				t.Fatalf("step %d: Reset(%q) at t0%+v: got %v, want %v", i, o.key, now.Sub(t0), g, w)
			}
			continue
		}
		if o.all != "" {
			gi, gd := engine.AllowAll(now, engine.Request{Engine: e, Key: o.key, N: o.n}, engine.Request{Engine: e, Key: o.all, N: 1})
			wi, wd := ref.allowAll(now, []string{o.key, o.all}, []int64{o.n, 1})
			if gi != wi || gd != wd {
				t.Fatalf("step %d: AllowAll(t0%+v, %q×%d, %q×1)\n got %d %+v\nwant %d %+v", i, now.Sub(t0), o.key, o.n, o.all, gi, gd, wi, wd)
			}
			continue
		}
		got = append(got, e.ReserveAt(o.key, o.n, now))
		wd, wr := ref.reserveAt(o.key, o.n, now)
		want = append(want, wr)
		if d := got[len(got)-1].Decision(); d != wd {
			t.Fatalf("step %d: ReserveAt(%q, %d, t0%+v)\n got %+v\nwant %+v\ncfg %+v", i, o.key, o.n, now.Sub(t0), d, wd, cfg)
		}
	}
	for key, k := range ref.keys {
		worst := ref.maxInWindow(k)
		switch cfg.Algorithm {
		case engine.SlidingWindowStrict, engine.SlidingLog:
			require.LessOrEqual(t, worst, cfg.Limit, "%v exceeded the limit for %q", cfg.Algorithm, key)
		case engine.SlidingWindow:
			require.Less(t, worst, 2*cfg.Limit, "weighted reached 2L for %q", key)
		case engine.FixedWindow:
			require.LessOrEqual(t, worst, 2*cfg.Limit, "fixed exceeded 2L for %q", key)
		}
	}
}

func TestReserveCancelMatchesReference(t *testing.T) {
	steps := 400
	if testing.Short() {
		steps = 100
	}
	for _, base := range propertyConfigs {
		for _, alg := range allAlgorithms {
			cfg := base
			cfg.Algorithm = alg
			t.Run(fmt.Sprintf("%v/L=%d/W=%v/N=%d", alg, cfg.Limit, cfg.Window, cfg.SubWindows), func(t *testing.T) {
				for seed := uint64(1); seed <= uint64(scaled(2, 8)); seed++ {
					rng := rand.New(rand.NewPCG(seed, 77+uint64(cfg.Limit)))
					var ops []rop
					for _, o := range randomScript(rng, cfg, steps) {
						ro := rop{op: o}
						if rng.IntN(6) == 0 {
							ro.all = []string{"a", "b", "", "tenant-42"}[rng.IntN(4)]
						} else if rng.IntN(5) == 0 {
							ro.settle, ro.actual = 1+rng.IntN(steps), rng.Int64N(3*cfg.Limit)-1
						} else if rng.IntN(8) == 0 {
							ro.charge = true
						} else if rng.IntN(12) == 0 {
							ro.reset = true
						} else if rng.IntN(3) == 0 {
							ro.cancel = 1 + rng.IntN(steps)
							if rng.IntN(2) == 0 {
								ro.cancel = 1 << 30 // the newest ones, mostly: (1<<30 − 1) mod count
							}
						}
						ops = append(ops, ro)
					}
					runReserveScript(t, cfg, ops)
				}
			})
		}
	}
}

// FuzzReserveCancel is FuzzOperations with cancels, AllowAll, settles,
// charges and resets: a byte pair whose first byte is odd cancels an
// earlier reservation (at every third step) or is an AllowAll with a second
// key (at the step before); at the step after, it settles one (a%4 == 1),
// or resets a key (a%4 == 3 and b ≥ 0xF0), or is a charge (a%4 == 3).
func FuzzReserveCancel(f *testing.F) {
	f.Add(uint8(0), uint8(3), []byte{9, 1, 3, 0, 13, 1, 9, 200, 7, 3, 17, 64})
	f.Add(uint8(3), uint8(7), []byte{21, 0, 1, 5, 21, 140, 3, 0, 41, 2, 5, 1})
	f.Add(uint8(1), uint8(4), []byte{13, 10, 13, 10, 1, 0, 13, 250, 3, 1, 13, 130})
	f.Add(uint8(2), uint8(6), []byte{9, 3, 13, 0, 21, 2, 5, 1, 7, 30, 1, 9, 13, 0, 41, 1, 3, 60})
	f.Add(uint8(3), uint8(3), []byte{9, 1, 9, 0, 13, 0, 3, 0xF5, 9, 0, 9, 0, 13, 1, 7, 0xF1, 9, 1, 21, 0})
	f.Add(uint8(1), uint8(3), []byte{9, 1, 9, 0, 13, 0, 3, 0xF5, 9, 0, 9, 0, 13, 1, 7, 0xF1, 9, 1, 21, 0})
	f.Fuzz(func(t *testing.T, alg, n uint8, data []byte) {
		cfg := engine.Config{
			Limit:      int64(n%16) + 1,
			Window:     time.Second,
			SubWindows: []int{1, 2, 4, 5, 8, 10, 16, 20, 25, 40, 50, 100}[int(n)%12],
			Algorithm:  engine.Algorithm(alg % 4),
		}
		w := cfg.Window / time.Duration(cfg.SubWindows)
		var ops []rop
		for i := 0; i+1 < len(data) && len(ops) < 200; i += 2 {
			a, b := data[i], data[i+1]
			var o rop
			switch {
			case a%2 == 1 && len(ops)%3 == 2:
				o.cancel = int(b) + 1
			case a%4 == 1 && len(ops)%3 == 0:
				o.settle, o.actual = int(b)+1, int64(a>>2)%(2*cfg.Limit+3)-1
			case a%4 == 3 && len(ops)%3 == 0 && b >= 0xF0:
				o.reset, o.key = true, string(rune('a'+a%3))
			case a%4 == 3 && len(ops)%3 == 0:
				o.charge = true
				o.key, o.n = string(rune('a'+a%3)), int64(b)%(2*cfg.Limit+3)-1
			default:
				o.key, o.n = string(rune('a'+a%3)), int64(a>>2)%(cfg.Limit+3)-1
				if a%2 == 1 && len(ops)%3 == 1 {
					o.all = string(rune('a' + b%3))
				}
			}
			switch {
			case b < 128:
				o.dt = w * time.Duration(b) / 32
			case b < 192:
				o.dt = cfg.Window * time.Duration(b-128) / 16
			default:
				o.dt = -w * time.Duration(b-192) / 16
			}
			ops = append(ops, o)
		}
		runReserveScript(t, cfg, ops)
	})
}

// ManualClock is a WaitClock.
var _ engine.WaitClock = (*engine.ManualClock)(nil)
