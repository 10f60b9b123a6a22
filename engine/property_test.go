package engine_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_700_000_000, 0)

// op is one step of a script: advance the time by dt (negative: go back),
// then ask for n units of key, or with charge, charge them (ChargeAt), or
// with reset, reset the key (Engine.Reset).
type op struct {
	key    string
	n      int64
	dt     time.Duration
	charge bool
	reset  bool
}

// runScript replays ops through a fresh engine and the reference, and
// reports the first step whose decisions differ.
func runScript(t testing.TB, cfg engine.Config, ops []op) {
	t.Helper()
	cfg.DisableEviction = true // the script's timeline is not the engine's clock
	e, err := engine.New(cfg)
	require.NoError(t, err)
	defer e.Close()
	ref := newModel(cfg)
	now := t0
	for i, o := range ops {
		now = now.Add(o.dt)
		if o.reset {
			if g, w := e.Reset(o.key), ref.reset(o.key); g != w {
				t.Fatalf("step %d: Reset(%q) at t0%+v: got %v, want %v", i, o.key, now.Sub(t0), g, w)
			}
			continue
		}
		if o.charge {
			got, err := e.ChargeAt(o.key, o.n, now)
			if want := ref.charge(o.key, max(o.n, 0), now.UnixNano()); o.n >= 0 && (err != nil || got != want) {
				t.Fatalf("step %d: ChargeAt(%q, %d, t0%+v)\n got %+v %v\nwant %+v", i, o.key, o.n, now.Sub(t0), got, err, want)
			} else if o.n < 0 && err == nil {
				t.Fatalf("step %d: ChargeAt(%q, %d): no error", i, o.key, o.n)
			}
			continue
		}
		got := e.AllowAt(o.key, o.n, now)
		want := ref.decideAt(o.key, o.n, now)
		if got != want {
			t.Fatalf("step %d: AllowAt(%q, %d, t0%+v)\n got %+v\nwant %+v\ncfg %+v", i, o.key, o.n, now.Sub(t0), got, want, cfg)
		}
	}
	// Bounds on the true count in any window, from the exact log.
	for key, k := range ref.keys {
		worst := ref.maxInWindow(k)
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
// decision against the reference. A first byte of 0xC0 or more on key "c"
// is a charge (ChargeAt) of n units rather than a request, and on key "b"
// a Reset of the key.
func FuzzOperations(f *testing.F) {
	f.Add(uint8(0), uint8(3), []byte{1, 1, 1, 1, 1, 9, 200, 1, 0, 0, 3, 7})
	f.Add(uint8(1), uint8(10), []byte{5, 250, 5, 251, 5, 0, 0, 128, 64, 2})
	f.Add(uint8(2), uint8(1), []byte{255, 255, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(0), uint8(60), []byte{3, 3, 3, 3, 3, 3, 200, 200, 17, 4})
	f.Add(uint8(3), uint8(7), []byte{9, 0, 5, 31, 2, 64, 60, 130, 1, 200, 13, 127, 6, 1})
	f.Add(uint8(1), uint8(5), []byte{0xC2, 3, 0xC5, 0, 1, 1, 0xFE, 140, 5, 2, 0xC2, 250})
	f.Add(uint8(3), uint8(3), []byte{1, 1, 1, 1, 1, 1, 0xC1, 3, 1, 0, 1, 0, 0xC1, 200, 1, 1})
	f.Add(uint8(0), uint8(4), []byte{1, 1, 1, 1, 1, 1, 0xC1, 3, 1, 0, 1, 0, 0xC1, 200, 1, 1})
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
			o := op{key: string(rune('a' + a%3)), n: int64(a>>2)%(cfg.Limit+3) - 1, charge: a >= 0xC0 && a%3 == 2, reset: a >= 0xC0 && a%3 == 1}
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

// Sequential scripts with SetLimit (lower, raise; SlidingLog
// growing its log) interleaved, against the reference with per-key limits.
func TestMatchesReferenceWithSetLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, N := range []int{1, 2, 5} {
			for seed := 0; seed < 20; seed++ {
				if err := runSetLimitScript(alg, N, rng); err != nil {
					t.Fatalf("%v N=%d: %v", alg, N, err)
				}
			}
		}
	}
}

func runSetLimitScript(alg engine.Algorithm, N int, rng *rand.Rand) error {
	base := int64(1_700_000_000_000_000_000)
	clk := engine.NewManualClock(time.Unix(0, base))
	cfg := engine.Config{Limit: 6, Window: time.Duration(N) * 100 * time.Millisecond, SubWindows: N, Algorithm: alg, DisableEviction: true, Clock: clk, PerKeyLimits: true, MaxLogLimit: 64}
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		cfg.SubWindows = 0
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ref := newModel(cfg) // per-key limits: the model keeps each key's own
	w := int64(cfg.Window) / int64(max(N, 1))
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		w = int64(cfg.Window)
	}
	now := base
	for i := 0; i < 300; i++ {
		switch rng.IntN(5) {
		case 0:
			now -= rng.Int64N(2 * w)
		case 1:
			now += w - 1
		default:
			now += rng.Int64N(w/2 + 1)
		}
		clk.Set(time.Unix(0, now))
		key := []string{"a", "b"}[rng.IntN(2)]
		if rng.IntN(6) == 0 {
			l := 1 + rng.Int64N(40)
			if err := e.SetLimit(key, l); err != nil {
				return err
			}
			// SetLimit is activity at the clock's time: it creates the key
			// there, or moves its time there (never backwards).
			ref.setLimit(key, l, now)
			continue
		}
		l := ref.lim(ref.key(key))
		n := []int64{0, 1, 1, 2, 3, l, l + 1, -1}[rng.IntN(8)]
		got := e.AllowAt(key, n, time.Unix(0, now))
		want := ref.decide(key, n, now)
		if got != want {
			return fmt.Errorf("step %d: AllowAt(%q, %d, base%+d)\n got %+v\nwant %+v", i, key, n, now-base, got, want)
		}
	}
	return nil
}

// A slot written once, then the key moved by steps just under the
// settle threshold and just under the revive gap, so that one slot is
// never the current one (steps that are multiples of N+1 keep landing on
// another index) — the slot must never be counted again.
func TestSettleKeepsAnUntouchedSlotDead(t *testing.T) {
	for _, N := range []int{1, 3, 1000} {
		for _, step := range []int64{1<<20 - 1, 1 << 20, 1<<21 - 1} {
			e := newEngine(t, engine.Config{Limit: 3, Window: time.Duration(N), SubWindows: N, Algorithm: engine.SlidingWindowStrict, DisableEviction: true})
			slots := int64(N + 1)
			s := step / slots * slots // keep the current index fixed
			if s == 0 {
				s = slots
			}
			now := int64(1 << 40)
			require.True(t, e.AllowAt("k", 2, time.Unix(0, now)).Allowed) // slot i full
			now++                                                         // next index, then walk in multiples of N+1
			require.True(t, e.AllowAt("k", 1, time.Unix(0, now)).Allowed)
			for j := 0; j < 40; j++ {
				now += s
				d := e.AllowAt("k", 0, time.Unix(0, now))
				assert.Equal(t, int64(3), d.Remaining, "N=%d step=%d j=%d: stale slot counted (peek)", N, s, j)
				d = e.AllowAt("k", 1, time.Unix(0, now))
				require.True(t, d.Allowed, "N=%d step=%d j=%d: %+v", N, s, j, d)
				// the slot of the original burst is at index (now−1−N) … it
				// stands for now−1 at the next step: check the full window
				d = e.AllowAt("k", 0, time.Unix(0, now+1))
				assert.Equal(t, int64(2), d.Remaining, "N=%d step=%d j=%d: next sub-window", N, s, j)
			}
		}
	}
}
