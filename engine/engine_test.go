package engine_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

func newEngine(t testing.TB, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

func TestBadConfig(t *testing.T) {
	ok := engine.Config{Limit: 10, Window: time.Second}
	cases := []struct {
		name string
		mod  func(*engine.Config)
		want []string // substrings: the field and the allowed range
	}{
		{"limit zero", func(c *engine.Config) { c.Limit = 0 }, []string{"Config.Limit = 0", "1 … 1099511627775"}},
		{"limit negative", func(c *engine.Config) { c.Limit = -5 }, []string{"Config.Limit = -5"}},
		{"limit too large for the slot", func(c *engine.Config) { c.Limit = engine.MaxLimit + 1 }, []string{"Config.Limit = 1099511627776", "1 … 1099511627775"}},
		{"window zero", func(c *engine.Config) { c.Window = 0 }, []string{"Config.Window = 0s", "> 0"}},
		{"window negative", func(c *engine.Config) { c.Window = -time.Second }, []string{"Config.Window = -1s"}},
		{"window too long", func(c *engine.Config) { c.Window = engine.MaxWindow + 1 }, []string{"Config.Window = 320255h", "≤ 320255h"}},
		{"subwindows negative", func(c *engine.Config) { c.SubWindows = -1 }, []string{"Config.SubWindows = -1", "1 … 1000"}},
		{"subwindows too many", func(c *engine.Config) { c.SubWindows = 1001 }, []string{"Config.SubWindows = 1001", "1 … 1000"}},
		{"fractional sub-window", func(c *engine.Config) { c.Window = 1000; c.SubWindows = 3 }, []string{"Config.Window = 1µs", "divisible by 3 ns"}},
		{"algorithm unknown", func(c *engine.Config) { c.Algorithm = 7 }, []string{"Config.Algorithm = 7"}},
		{"shards not a power of two", func(c *engine.Config) { c.Shards = 3 }, []string{"Config.Shards = 3", "power of two"}},
		{"shards too many", func(c *engine.Config) { c.Shards = 1 << 17 }, []string{"Config.Shards = 131072"}},
		{"max keys negative", func(c *engine.Config) { c.MaxKeys = -1 }, []string{"Config.MaxKeys = -1"}},
		{"expected keys negative", func(c *engine.Config) { c.ExpectedKeys = -1 }, []string{"Config.ExpectedKeys = -1", "0 (grow as keys come) or 1 … 16777216"}},
		{"expected keys too many", func(c *engine.Config) { c.ExpectedKeys = engine.MaxExpectedKeys + 1 }, []string{"Config.ExpectedKeys = 16777217", "1 … 16777216"}},
		{"expected keys above the slab's bound", func(c *engine.Config) {
			c.SubWindows = 50
			c.PerKeyLimits = true
			c.ExpectedKeys = engine.MaxExpectedKeys
		}, []string{"Config.ExpectedKeys = 16777216", "for this configuration", "MiB"}},
		{"expected keys above max keys", func(c *engine.Config) { c.MaxKeys = 1000; c.ExpectedKeys = 1001 }, []string{"Config.ExpectedKeys = 1001", "1 … 1000 (Config.MaxKeys)"}},
		{"coarse clock too fine", func(c *engine.Config) { c.CoarseClock = time.Microsecond }, []string{"Config.CoarseClock = 1µs", "≥ 100µs"}},
		{"two clocks", func(c *engine.Config) { c.CoarseClock = time.Millisecond; c.Clock = engine.NewManualClock(t0) }, []string{"Config.Clock and Config.CoarseClock"}},
		{"sweep negative", func(c *engine.Config) { c.SweepInterval = -1 }, []string{"Config.SweepInterval = -1ns"}},
		{"log limit above the default cap", func(c *engine.Config) { c.Algorithm = engine.SlidingLog; c.Limit = 10_001 }, []string{"Config.Limit = 10001 is too large for SlidingLog", "want 1 … 10000", "Config.MaxLogLimit", "up to 1048576"}},
		{"log limit above a set cap", func(c *engine.Config) { c.Algorithm = engine.SlidingLog; c.MaxLogLimit = 500; c.Limit = 501 }, []string{"Config.Limit = 501 is too large for SlidingLog", "want 1 … 500"}},
		{"log limit zero", func(c *engine.Config) { c.Algorithm = engine.SlidingLog; c.Limit = 0 }, []string{"Config.Limit = 0, want 1 … 10000"}},
		{"max log limit negative", func(c *engine.Config) { c.MaxLogLimit = -1 }, []string{"Config.MaxLogLimit = -1", "0 (default 10000) or 1 … 1048576"}},
		{"max log limit above the ceiling", func(c *engine.Config) { c.Algorithm = engine.SlidingLog; c.MaxLogLimit = engine.MaxLogLimitCeiling + 1 }, []string{"Config.MaxLogLimit = 1048577", "1 … 1048576"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			c.mod(&cfg)
			e, err := engine.New(cfg)
			require.Error(t, err)
			require.Nil(t, e)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	// The log's cap moves with MaxLogLimit, up to the ceiling; the other
	// algorithms ignore it.
	for _, c := range []engine.Config{
		{Limit: 10_000, Window: time.Second, Algorithm: engine.SlidingLog},
		{Limit: engine.MaxLogLimitCeiling, Window: time.Second, Algorithm: engine.SlidingLog, MaxLogLimit: engine.MaxLogLimitCeiling},
		{Limit: engine.MaxLimit, Window: time.Second, MaxLogLimit: 5},
	} {
		e, err := engine.New(c)
		require.NoError(t, err, "%+v", c)
		require.NoError(t, e.Close())
	}
	// Every N from 1 to 1000 works when the window divides.
	for n := 1; n <= engine.MaxSubWindows; n++ {
		e, err := engine.New(engine.Config{Limit: 3, Window: time.Duration(n) * time.Millisecond, SubWindows: n, DisableEviction: true})
		require.NoError(t, err, "N=%d", n)
		require.True(t, e.AllowAt("k", 3, t0).Allowed)
		require.False(t, e.AllowAt("k", 1, t0).Allowed)
		require.True(t, e.AllowAt("k", 3, t0.Add(time.Duration(n+1)*time.Millisecond)).Allowed, "N=%d", n)
		require.NoError(t, e.Close())
	}
}

func TestBadN(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: alg, DisableEviction: true})
			// On an unknown key nothing is created.
			for _, n := range []int64{0, -1, 6} {
				e.AllowAt("new", n, t0)
			}
			require.Zero(t, e.Len(), "a request that records nothing must not create the key")

			require.True(t, e.AllowAt("k", 2, t0).Allowed)
			d := e.AllowAt("k", 0, t0)
			require.Equal(t, engine.Decision{Allowed: true, Limit: 5, Remaining: 3}, d)

			d = e.AllowAt("k", -3, t0)
			require.Equal(t, engine.Decision{Limit: 5, Remaining: 3, RetryAfter: engine.Never}, d)
			require.Equal(t, engine.ReasonNever, d.Reason())
			require.Equal(t, int64(3), e.AllowAt("k", 0, t0).Remaining, "n < 0 must never refund")

			d = e.AllowAt("k", 6, t0)
			require.Equal(t, engine.Decision{Limit: 5, Remaining: 3, RetryAfter: engine.Never}, d)
			require.Equal(t, engine.ReasonNever, d.Reason())
			require.Equal(t, int64(3), e.AllowAt("k", 0, t0).Remaining, "n > limit must record nothing")

			// The capacity is intact: exactly 3 more fit.
			require.True(t, e.AllowAt("k", 3, t0).Allowed)
			require.False(t, e.AllowAt("k", 1, t0).Allowed)
		})
	}
}

func TestClockBackwardsGainsNothingErasesNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: alg, DisableEviction: true})
			late := t0.Add(5*time.Second + 950*time.Millisecond)
			require.True(t, e.AllowAt("k", 6, late).Allowed)
			rem := e.AllowAt("k", 0, late).Remaining
			// A far older time, and a time just before late's sub-window:
			// neither may see more room than the newest time did, nor
			// record into an older sub-window that would expire sooner.
			for _, back := range []time.Time{t0, late.Add(-60 * time.Millisecond), time.Unix(0, 1)} {
				require.LessOrEqual(t, e.AllowAt("k", 0, back).Remaining, rem)
				require.False(t, e.AllowAt("k", 5, back).Allowed)
			}
			require.True(t, e.AllowAt("k", 4, t0).Allowed) // recorded at late's sub-window
			require.False(t, e.AllowAt("k", 1, late).Allowed, "the units admitted at an old time must count at the newest")
		})
	}
}

func TestInvalidTime(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 10, Window: time.Second})
	d := e.AllowAt("k", 1, time.Unix(-1, 0))
	require.Equal(t, engine.Decision{Limit: 10, RetryAfter: engine.Never}, d)
	require.Equal(t, engine.ReasonNever, d.Reason())
	require.False(t, e.AllowAt("k", 1, time.Time{}).Allowed)
	require.Zero(t, e.Len())
}

// A key idle for any number of sub-windows starts fresh, including gaps that
// are multiples of the tag space (2^24) and of the ring size.
func TestTagAliasing(t *testing.T) {
	for _, n := range []int{1, 7, 10, 15} {
		w := time.Millisecond
		cfg := engine.Config{Limit: int64(3 * (n + 1)), Window: time.Duration(n) * w, SubWindows: n, DisableEviction: true}
		var gaps []int64
		for b := 0; b <= 40; b++ {
			gaps = append(gaps, 1<<b)
			if b <= 36 {
				gaps = append(gaps, int64(n+1)<<b)
			}
		}
		gaps = append(gaps, 1<<24-1, 1<<24+1, 1<<22-1, 1<<22, 1<<23)
		for _, alg := range allAlgorithms {
			cfg.Algorithm = alg
			e := newEngine(t, cfg)
			for i, gap := range gaps {
				key := fmt.Sprint(i)
				// Fill every slot of the ring: 3 units per sub-window.
				start := t0
				for s := 0; s <= n; s++ {
					e.AllowAt(key, 3, start.Add(time.Duration(s)*w))
				}
				last := start.Add(time.Duration(n) * w)
				then := last.Add(time.Duration(gap) * w)
				if gap <= int64(n) {
					continue // still inside the window: not idle
				}
				// Fresh: the whole limit fits, one unit at a time, in one
				// sub-window, and not one more.
				for j := int64(0); j < cfg.Limit; j++ {
					d := e.AllowAt(key, 1, then)
					require.True(t, d.Allowed, "N=%d %v gap=%d unit %d: %+v", n, alg, gap, j, d)
				}
				require.False(t, e.AllowAt(key, 1, then).Allowed, "N=%d %v gap=%d", n, alg, gap)
			}
		}
	}
}

func TestKeys(t *testing.T) {
	// The largest MaxKeyBytes, so that two 1 MiB keys differing in their
	// last byte are held apart (keylength_test.go checks the cap itself).
	e := newEngine(t, engine.Config{Limit: 2, Window: time.Second, DisableEviction: true, MaxKeyBytes: engine.MaxKeyBytesCeiling})
	huge := strings.Repeat("x", 1<<20)
	keys := []string{"", "a", "A", huge, huge[:len(huge)-1] + "y", "\x00", "ключ"}
	for _, k := range keys {
		require.True(t, e.AllowAt(k, 2, t0).Allowed, "key of length %d", len(k))
	}
	for _, k := range keys {
		require.False(t, e.AllowAt(k, 1, t0).Allowed, "key of length %d", len(k))
	}
	require.Equal(t, int64(len(keys)), e.Len())
}

func TestMaxKeysRefusesNewKeysNeverEvictsLiveOnes(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, MaxKeys: 3, Clock: clk})
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, e.AllowN(k, 1).Allowed)
	}
	d := e.AllowN("d", 1)
	require.False(t, d.Allowed)
	require.Equal(t, engine.Decision{Limit: 5, Remaining: 5, RetryAfter: 1200 * time.Millisecond}, d)
	require.Equal(t, engine.ReasonKeysFull, d.Reason())
	require.Equal(t, engine.Stats{Keys: 3, Refused: 1}, e.Stats())
	// Existing keys keep working and keep their counts.
	require.Equal(t, int64(4), e.AllowN("a", 0).Remaining)
	require.True(t, e.AllowN("a", 4).Allowed)
	// Once idle keys are reclaimed there is room again.
	clk.Advance(1100 * time.Millisecond)
	require.Zero(t, e.Sweep(), "idle for Window plus one sub-window: kept")
	clk.Advance(100 * time.Millisecond)
	require.Equal(t, 3, e.Sweep())
	require.True(t, e.AllowN("d", 1).Allowed)
	require.Equal(t, int64(1), e.Len())
}

func TestPerKeyLimits(t *testing.T) {
	tiers := map[string]int64{"free": 2, "pro": 5}
	e := newEngine(t, engine.Config{
		Limit: 3, Window: time.Second, DisableEviction: true,
		KeyLimit: func(key string) int64 { return tiers[strings.SplitN(key, ":", 2)[0]] },
	})
	require.Equal(t, int64(2), e.AllowAt("free:1", 0, t0).Limit)
	require.True(t, e.AllowAt("free:1", 2, t0).Allowed)
	require.False(t, e.AllowAt("free:1", 1, t0).Allowed)
	require.True(t, e.AllowAt("pro:1", 5, t0).Allowed)
	d := e.AllowAt("other", 3, t0) // resolver says 0: the default
	require.True(t, d.Allowed)
	require.Equal(t, int64(3), d.Limit)

	// SetLimit keeps the counts: 2 used of a new limit of 4. (SetLimitAt on
	// this test's own timeline: SetLimit would be activity at the engine's
	// clock, years after t0.)
	require.NoError(t, e.SetLimitAt("free:1", 4, t0))
	d = e.AllowAt("free:1", 0, t0)
	require.Equal(t, int64(4), d.Limit)
	require.Equal(t, int64(2), d.Remaining)
	require.True(t, e.AllowAt("free:1", 2, t0).Allowed)
	require.False(t, e.AllowAt("free:1", 1, t0).Allowed)
	// A limit below what is already used refuses until it decays.
	require.NoError(t, e.SetLimitAt("free:1", 1, t0))
	require.False(t, e.AllowAt("free:1", 1, t0).Allowed)

	require.ErrorContains(t, e.SetLimit("x", 0), "SetLimit limit = 0, want 1 … 1099511627775")

	bad := newEngine(t, engine.Config{Limit: 3, Window: time.Second, KeyLimit: func(string) int64 { return -1 }})
	d = bad.AllowAt("k", 1, t0)
	require.Equal(t, engine.Decision{Limit: 3, RetryAfter: engine.Never}, d)
	require.Zero(t, bad.Len())

	plain := newEngine(t, engine.Config{Limit: 3, Window: time.Second})
	require.ErrorContains(t, plain.SetLimit("k", 2), "PerKeyLimits")
}

func TestSweepReclaimsIdleKeys(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Clock: clk, SweepInterval: time.Hour})
	for i := 0; i < 100; i++ {
		e.AllowN(fmt.Sprint(i), 1)
	}
	clk.Advance(time.Second) // t0's sub-window is still partly inside
	require.Zero(t, e.Sweep())
	e.AllowN("7", 1) // keeps key 7 alive
	clk.Advance(100 * time.Millisecond)
	require.Zero(t, e.Sweep(), "idle for Window plus one sub-window: kept")
	clk.Advance(100 * time.Millisecond)
	require.Equal(t, 99, e.Sweep())
	require.Equal(t, engine.Stats{Keys: 1, Evicted: 99}, e.Stats())
	require.Equal(t, int64(4), e.AllowN("7", 0).Remaining) // only the unit at t0+1s is inside
}

func TestCloseLeavesNoGoroutineBehind(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e, err := engine.New(engine.Config{Limit: 5, Window: time.Second, Clock: clk, Shards: 4, SweepInterval: 4 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	c, err := engine.New(engine.Config{Limit: 5, Window: time.Second, CoarseClock: time.Millisecond, DisableEviction: true})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.True(t, c.Allow("k"))
	sweeper := fmt.Sprintf("engine.(*Engine).sweeper(%p", e)
	const coarse = "clock.(*Coarse).run(" // no other test runs a coarse clock concurrently
	// Both goroutines run, and the sweeper does its work.
	requireStacks(t, sweeper, true)
	requireStacks(t, coarse, true)
	e.AllowN("k", 1)
	clk.Advance(2 * time.Second)
	require.Eventually(t, func() bool { return e.Stats().Evicted == 1 }, 5*time.Second, time.Millisecond)

	require.NoError(t, e.Close())
	require.NoError(t, e.Close()) // idempotent
	require.NoError(t, c.Close())
	// Other tests' engines may still be closing (t.Cleanup), so look only
	// for this test's goroutines: none may be left.
	requireStacks(t, sweeper, false)
	requireStacks(t, coarse, false)
}

// requireStacks checks that some goroutine's stack contains s (want) or
// that none does. A goroutine just started or just told to exit may take a
// moment to show or to go, so yield (no sleep) until a deadline.
func requireStacks(t *testing.T, s string, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for stacksContain(s) != want && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	require.Equal(t, want, stacksContain(s), "a goroutine running %q: want %v", s, want)
}

func stacksContain(s string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), s)
}

func TestUpdateLimitsKeepsCounts(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			tiers := map[string]int64{"free": 2, "pro": 5}
			e := newEngine(t, engine.Config{Limit: 3, Window: time.Second, Algorithm: alg, DisableEviction: true, PerKeyLimits: true})
			require.True(t, e.AllowAt("free:a", 2, t0).Allowed)
			require.True(t, e.AllowAt("pro:b", 3, t0).Allowed)
			require.NoError(t, e.UpdateLimits(func(key string, limit int64) int64 {
				return tiers[strings.SplitN(key, ":", 2)[0]]
			}))
			d := e.AllowAt("free:a", 0, t0)
			require.Equal(t, int64(2), d.Limit)
			require.Equal(t, int64(0), d.Remaining, "the 2 units admitted before the update still count")
			d = e.AllowAt("pro:b", 0, t0)
			require.Equal(t, int64(5), d.Limit)
			require.Equal(t, int64(2), d.Remaining)
			err := e.UpdateLimits(func(string, int64) int64 { return -1 })
			require.ErrorContains(t, err, "UpdateLimits limit = -1")
		})
	}
	plain := newEngine(t, engine.Config{Limit: 3, Window: time.Second})
	require.ErrorContains(t, plain.UpdateLimits(func(string, int64) int64 { return 1 }), "PerKeyLimits")
}

func TestConfigReportsDefaults(t *testing.T) {
	for _, tc := range []struct {
		alg  engine.Algorithm
		n    int
		want int
	}{
		{engine.SlidingWindow, 0, engine.DefaultSubWindows},
		{engine.SlidingWindowStrict, 4, 4},
		{engine.FixedWindow, 7, 0},
		{engine.SlidingLog, 3, 0},
	} {
		e, err := engine.New(engine.Config{Limit: 5, Window: time.Second, SubWindows: tc.n, Algorithm: tc.alg, DisableEviction: true})
		require.NoError(t, err)
		c := e.Config()
		require.Equal(t, tc.want, c.SubWindows, tc.alg.String())
		require.Equal(t, time.Second, e.Window())
		require.Equal(t, int64(5), c.Limit)
		require.NotZero(t, c.Shards)
		require.Equal(t, tc.alg == engine.SlidingLog, c.MaxLogLimit == engine.DefaultMaxLogLimit, tc.alg.String())
		e.Close()
	}
}

// Bad configurations error (naming the field), never panic.
func TestBadConfigNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	vals := []int64{-1, 0, 1, 2, 7, 1000, 1001, 1 << 20, 1<<20 + 1, engine.MaxLimit, engine.MaxLimit + 1, int64(engine.MaxWindow), int64(engine.MaxWindow) + 1, 1<<63 - 1, -1 << 63}
	pick := func() int64 { return vals[rng.IntN(len(vals))] }
	for i := 0; i < 20000; i++ {
		cfg := engine.Config{
			Limit: pick(), Window: time.Duration(pick()), SubWindows: int(pick()), Algorithm: engine.Algorithm(rng.IntN(6) - 1),
			MaxLogLimit: pick(), Shards: int(pick()), MaxKeys: pick(), SweepInterval: time.Duration(pick()),
			DisableEviction: true,
		}
		if rng.IntN(4) == 0 {
			cfg.CoarseClock = time.Duration(pick())
			cfg.DisableEviction = false
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("New(%+v) panicked: %v", cfg, r)
				}
			}()
			e, err := engine.New(cfg)
			if err != nil {
				require.Contains(t, err.Error(), "Config.")
				return
			}
			if cfg.Algorithm != engine.SlidingLog {
				d := e.AllowAt("k", 1, time.Unix(0, 1<<62))
				require.True(t, d.Allowed || d.Limit < 1, "%+v %+v", cfg, d)
				_ = e.AllowAt("k", cfg.Limit, time.Unix(0, 1<<62+1))
				_ = e.AllowAt("k", 1, time.Unix(0, 1<<63-1))
			}
			e.Close()
		}()
	}
}

// An Algorithm or Reason outside the defined ones prints as a value, not
// as one of the names (a log line must not mislabel a corrupt value).
func TestUndefinedEnumValuesPrintAsValues(t *testing.T) {
	require.Equal(t, "Algorithm(9)", engine.Algorithm(9).String())
	require.Equal(t, "Algorithm(-1)", engine.Algorithm(-1).String())
	require.Equal(t, "unknown", engine.Reason(200).String())
}

// Shards 0 is the smallest power of two ≥ 8·GOMAXPROCS, at least 16, as
// Config.Shards documents.
func TestDefaultShardsFollowGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct{ procs, want int }{{1, 16}, {2, 16}, {3, 32}, {4, 32}, {16, 128}, {17, 256}} {
		runtime.GOMAXPROCS(c.procs)
		e := newEngine(t, engine.Config{Limit: 1, Window: time.Second})
		require.Equal(t, c.want, e.Config().Shards, "GOMAXPROCS %d", c.procs)
	}
}
