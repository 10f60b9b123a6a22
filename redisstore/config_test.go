package redisstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// Config reports what the limiter decides with, defaults filled in as the
// engine fills them, so that httplimit and grpclimit can send w= and t=
// for a redisstore limiter as for an engine (they look for Config()).
func TestConfigAsTheEngineReportsIt(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, cfg := range []engine.Config{
		{Limit: 7, Window: time.Minute},
		{Limit: 7, Window: time.Minute, SubWindows: 6, Algorithm: engine.SlidingWindowStrict},
		{Limit: 7, Window: time.Hour, Algorithm: engine.FixedWindow},
	} {
		l := mustNew(t, c, cfg, WithBreaker(0, 0))
		e, err := engine.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := e.Config()
		_ = e.Close()
		got := l.Config()
		if got.Limit != want.Limit || got.Window != want.Window || got.SubWindows != want.SubWindows || got.Algorithm != want.Algorithm {
			t.Fatalf("Config() = %+v, the engine's %+v", got, want)
		}
		var _ interface{ Config() engine.Config } = l
	}
}

// New refuses bad input with an error naming the field and the allowed
// range: the Config, WithBreaker and WithHybrid, one subtest each. No
// server is needed: New refuses before any round trip.
func TestConfigErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	t.Run("Config", func(t *testing.T) {
		for _, tc := range []struct {
			cfg  engine.Config
			want string
		}{
			{engine.Config{Window: time.Second}, "Limit"},
			{engine.Config{Limit: 1}, "Window"},
			{engine.Config{Limit: 1, Window: time.Second, Algorithm: engine.SlidingLog}, "SlidingLog"},
			{engine.Config{Limit: 1, Window: 10 * time.Microsecond, SubWindows: 4}, "microseconds"},
			{engine.Config{Limit: 1e8, Window: 10 * time.Second, SubWindows: 10}, "2^53"},
			{engine.Config{Limit: 1, Window: 200 * 24 * time.Hour, SubWindows: 10}, "2^53"},
			{engine.Config{Limit: 1, Window: time.Second, PerKeyLimits: true}, "PerKeyLimits"},
		} {
			_, err := New(c, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
			}
		}
		// Strict and Fixed have no product bound.
		if _, err := New(c, engine.Config{Limit: 1e8, Window: 10 * time.Second, Algorithm: engine.SlidingWindowStrict}); err != nil {
			t.Error(err)
		}
		if _, err := New(c, engine.Config{Limit: 1, Window: time.Second}, WithFallbackLocal(0)); err == nil {
			t.Error("share 0 accepted")
		}
	})
	// A field only the in-process engine implements is refused, naming
	// the field, rather than ignored; those that mean something over
	// Redis are accepted (redisstore/README.md lists both).
	t.Run("EngineOnlyFields", func(t *testing.T) {
		base := engine.Config{Limit: 10, Window: time.Second}
		for _, tc := range []struct {
			field string
			set   func(*engine.Config)
		}{
			{"MaxLogLimit", func(c *engine.Config) { c.MaxLogLimit = 100 }},
			{"Clock", func(c *engine.Config) { c.Clock = engine.NewManualClock(time.Unix(1_700_000_000, 0)) }},
			{"CoarseClock", func(c *engine.Config) { c.CoarseClock = time.Millisecond }},
			{"Shards", func(c *engine.Config) { c.Shards = 4 }},
			{"MaxKeys", func(c *engine.Config) { c.MaxKeys = 1000 }},
			{"ExpectedKeys", func(c *engine.Config) { c.ExpectedKeys = 1000 }},
			{"DisableEviction", func(c *engine.Config) { c.DisableEviction = true }},
			{"SweepInterval", func(c *engine.Config) { c.SweepInterval = time.Second }},
			{"Audit", func(c *engine.Config) { c.Audit = 0.5 }},
			{"AuditMaxKeys", func(c *engine.Config) { c.AuditMaxKeys = 10 }},
			{"AuditMaxEntries", func(c *engine.Config) { c.AuditMaxEntries = 10 }},
			{"AuditBuffer", func(c *engine.Config) { c.AuditBuffer = 64 }},
		} {
			cfg := base
			tc.set(&cfg)
			l, err := New(c, cfg, WithBreaker(0, 0))
			if err == nil {
				_ = l.Close()
				t.Errorf("Config.%s accepted, want an error naming it", tc.field)
				continue
			}
			if want := "redisstore: Config." + tc.field + " is set"; !strings.Contains(err.Error(), want) {
				t.Errorf("Config.%s: %v, want an error containing %q", tc.field, err, want)
			}
		}
		// Honoured over Redis: the window's shape, the algorithm, the key
		// cap and per-key limits (PerKeyLimits with KeyLimit, which
		// implies it).
		for _, cfg := range []engine.Config{
			{Limit: 10, Window: time.Second, SubWindows: 5, Algorithm: engine.SlidingWindowStrict},
			{Limit: 10, Window: time.Second, Algorithm: engine.FixedWindow},
			{Limit: 10, Window: time.Second, MaxKeyBytes: 64},
			{Limit: 10, Window: time.Second, KeyLimit: func(string) int64 { return 0 }, PerKeyLimits: true},
		} {
			l, err := New(c, cfg, WithBreaker(0, 0))
			if err != nil {
				t.Errorf("New(%+v): %v", cfg, err)
				continue
			}
			got := l.Config()
			_ = l.Close()
			if got.Shards != 0 || got.SweepInterval != 0 || got.MaxKeys != 0 || got.Clock != nil {
				t.Errorf("Config() reports engine-only fields: %+v", got)
			}
		}
	})
	// "Bad input gets clear errors at New": the microsecond error ends mid-sentence.
	t.Run("WholeSentence", func(t *testing.T) {
		_, err := New(c, engine.Config{Limit: 1, Window: 10 * time.Microsecond, SubWindows: 4})
		if err == nil {
			t.Fatal("accepted")
		}
		msg := err.Error()
		t.Logf("%s", msg)
		if strings.HasSuffix(strings.TrimSpace(msg), " is") {
			t.Errorf("error message is cut off mid-sentence: %q", msg)
		}
	})
	t.Run("WithBreaker", func(t *testing.T) {
		cfg := engine.Config{Limit: 1, Window: time.Second}
		for _, tc := range []struct{ min, max time.Duration }{
			{0, time.Second}, {time.Microsecond, time.Second}, {time.Second, time.Millisecond}, {time.Second, 2 * time.Minute}, {-1, -1},
		} {
			if _, err := New(c, cfg, WithBreaker(tc.min, tc.max)); err == nil || !strings.Contains(err.Error(), "WithBreaker") {
				t.Errorf("WithBreaker(%v, %v): %v", tc.min, tc.max, err)
			}
		}
		if _, err := New(c, cfg, WithBreaker(time.Millisecond, time.Second), WithHybrid(time.Millisecond, 1)); !errors.Is(err, errBreakerHybrid) {
			t.Errorf("WithBreaker with WithHybrid: %v", err)
		}
		for _, o := range []Option{WithBreaker(0, 0), WithBreaker(time.Millisecond, time.Millisecond)} {
			l, err := New(c, cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Close()
		}
	})
	t.Run("WithFailurePolicyAndWithPrefix", func(t *testing.T) {
		cfg := engine.Config{Limit: 1, Window: time.Second}
		for _, tc := range []struct {
			opt  Option
			want string
		}{
			{WithFailurePolicy(FallbackLocal), "redisstore: WithFailurePolicy(fallback-local): want FailClosed or FailOpen (FallbackLocal needs WithFallbackLocal)"},
			{WithFailurePolicy(FailurePolicy(7)), "redisstore: WithFailurePolicy(FailurePolicy(7)): want FailClosed or FailOpen"},
			{WithPrefix("rl:{x}:"), `redisstore: WithPrefix("rl:{x}:"): the prefix must not contain braces`},
		} {
			if _, err := New(c, cfg, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		}
		for p, want := range map[FailurePolicy]string{FailClosed: "fail-closed", FailOpen: "fail-open", FallbackLocal: "fallback-local"} {
			if p.String() != want {
				t.Errorf("%d.String() = %q, want %q", int(p), p.String(), want)
			}
		}
	})
	t.Run("WithHybrid", func(t *testing.T) {
		cfg := engine.Config{Limit: 10, Window: time.Second}
		for _, tc := range []struct {
			opt  Option
			want string
		}{
			{WithHybrid(time.Microsecond, 1), "1ms ≤ interval ≤ Config.Window"},
			{WithHybrid(2*time.Second, 1), "1ms ≤ interval ≤ Config.Window (1s)"},
			{WithHybrid(time.Millisecond, 0), "1 ≤ maxLocal ≤ Config.Limit"},
			{WithHybrid(time.Millisecond, 11), "1 ≤ maxLocal ≤ Config.Limit (10)"},
		} {
			if _, err := New(c, cfg, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		}
	})
}
