package engine_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

var t0 = time.Unix(1_700_000_000, 0)

// op is one step of a script: advance the time by dt (negative: go back),
// then ask for n units of key.
type op struct {
	key string
	n   int64
	dt  time.Duration
}

// runScript replays ops through a fresh engine and the reference, and
// reports the first step whose decisions differ.
func runScript(t testing.TB, cfg engine.Config, ops []op) {
	t.Helper()
	cfg.DisableEviction = true // the script's timeline is not the engine's clock
	e, err := engine.New(cfg)
	require.NoError(t, err)
	defer e.Close()
	ref := newRef(cfg)
	now := t0
	for i, o := range ops {
		now = now.Add(o.dt)
		got := e.AllowAt(o.key, o.n, now)
		want := ref.decide(o.key, o.n, now)
		if got != want {
			t.Fatalf("step %d: AllowAt(%q, %d, t0%+v)\n got %+v\nwant %+v\ncfg %+v", i, o.key, o.n, now.Sub(t0), got, want, cfg)
		}
	}
	// Bounds on the true count in any window, from the exact log.
	for key, k := range ref.keys {
		worst := maxInWindow(k.log, ref.win)
		switch cfg.Algorithm {
		case engine.SlidingWindowStrict:
			require.LessOrEqual(t, worst, cfg.Limit, "strict exceeded the limit for %q", key)
		case engine.SlidingLog:
			require.LessOrEqual(t, worst, cfg.Limit, "the exact log exceeded the limit for %q", key)
		case engine.SlidingWindow:
			require.Less(t, worst, 2*cfg.Limit, "weighted reached 2L for %q", key)
		case engine.FixedWindow:
			require.LessOrEqual(t, worst, 2*cfg.Limit, "fixed exceeded 2L for %q", key)
		}
	}
}

// randomScript draws a script whose steps cross sub-window and window
// boundaries, sometimes go back in time, and use every class of n.
func randomScript(rng *rand.Rand, cfg engine.Config, steps int) []op {
	keys := []string{"a", "b", "", "tenant-42"}
	w := cfg.Window / time.Duration(max(cfg.SubWindows, 1))
	ops := make([]op, steps)
	for i := range ops {
		o := op{key: keys[rng.IntN(len(keys))]}
		switch rng.IntN(10) {
		case 0:
			o.n = 0
		case 1:
			o.n = -rng.Int64N(3) - 1
		case 2:
			o.n = cfg.Limit + 1 + rng.Int64N(2)
		case 3:
			o.n = 1 + rng.Int64N(cfg.Limit)
		default:
			o.n = 1 + rng.Int64N(min(cfg.Limit, 3))
		}
		switch rng.IntN(12) {
		case 0, 1, 2:
			o.dt = 0
		case 3:
			o.dt = -time.Duration(rng.Int64N(int64(w) * 2)) // clock goes back
		case 4:
			o.dt = w // exactly one sub-window
		case 5:
			o.dt = cfg.Window + time.Duration(rng.Int64N(int64(w)))
		case 6:
			o.dt = time.Duration(rng.Int64N(int64(cfg.Window) * 3))
		default:
			o.dt = time.Duration(rng.Int64N(int64(w)))
		}
		ops[i] = o
	}
	return ops
}

var propertyConfigs = []engine.Config{
	{Limit: 1, Window: time.Second, SubWindows: 2},
	{Limit: 5, Window: time.Second, SubWindows: 1},
	{Limit: 10, Window: time.Second}, // N = 10 by default
	{Limit: 7, Window: 3 * time.Second, SubWindows: 3},
	{Limit: 100, Window: 60 * time.Millisecond, SubWindows: 60},
	{Limit: 3, Window: 7, SubWindows: 7}, // 1 ns sub-windows
	{Limit: 1000, Window: time.Minute, SubWindows: 15},
}

func TestPropertyMatchesReference(t *testing.T) {
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
					rng := rand.New(rand.NewPCG(seed, uint64(cfg.Limit)))
					runScript(t, cfg, randomScript(rng, cfg, steps))
				}
			})
		}
	}
}

// FuzzOperations decodes random bytes into a script and checks every
// decision against the reference.
func FuzzOperations(f *testing.F) {
	f.Add(uint8(0), uint8(3), []byte{1, 1, 1, 1, 1, 9, 200, 1, 0, 0, 3, 7})
	f.Add(uint8(1), uint8(10), []byte{5, 250, 5, 251, 5, 0, 0, 128, 64, 2})
	f.Add(uint8(2), uint8(1), []byte{255, 255, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(0), uint8(60), []byte{3, 3, 3, 3, 3, 3, 200, 200, 17, 4})
	f.Add(uint8(3), uint8(7), []byte{9, 0, 5, 31, 2, 64, 60, 130, 1, 200, 13, 127, 6, 1})
	f.Fuzz(func(t *testing.T, alg, n uint8, data []byte) {
		cfg := engine.Config{
			Limit:      int64(n%16) + 1,
			Window:     time.Second,
			SubWindows: []int{1, 2, 4, 5, 8, 10, 16, 20, 25, 40, 50, 100}[int(n)%12], // divisors of 1s
			Algorithm:  engine.Algorithm(alg % 4),
		}
		w := cfg.Window / time.Duration(cfg.SubWindows)
		var ops []op
		for i := 0; i+1 < len(data) && len(ops) < 200; i += 2 {
			a, b := data[i], data[i+1]
			o := op{key: string(rune('a' + a%3)), n: int64(a>>2)%(cfg.Limit+3) - 1}
			// b picks the step: fractions of a sub-window, whole windows,
			// or a step back.
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
		runScript(t, cfg, ops)
	})
}

// Allow takes its own path (no Remaining, no RetryAfter); its verdicts must
// be AllowN's, step for step.
func TestAllowMatchesAllowN(t *testing.T) {
	for _, alg := range allAlgorithms {
		c1, c2 := engine.NewManualClock(t0), engine.NewManualClock(t0)
		cfg := engine.Config{Limit: 5, Window: time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true}
		cfg.Clock = c1
		a := newEngine(t, cfg)
		cfg.Clock = c2
		b := newEngine(t, cfg)
		rng := rand.New(rand.NewPCG(9, uint64(alg)))
		for i := 0; i < 3000; i++ {
			d := time.Duration(rng.Int64N(int64(150 * time.Millisecond)))
			c1.Advance(d)
			c2.Advance(d)
			key := []string{"x", "y"}[rng.IntN(2)]
			require.Equal(t, b.AllowN(key, 1).Allowed, a.Allow(key), "%v step %d", alg, i)
		}
	}
}
