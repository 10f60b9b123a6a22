package engine_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

func TestAuditBadConfig(t *testing.T) {
	ok := engine.Config{Limit: 10, Window: time.Second}
	cases := []struct {
		name string
		mod  func(*engine.Config)
		want []string
	}{
		{"negative", func(c *engine.Config) { c.Audit = -0.1 }, []string{"Config.Audit = -0.1", "0 (off) or a share of keys in (0, 1]"}},
		{"above one", func(c *engine.Config) { c.Audit = 1.5 }, []string{"Config.Audit = 1.5", "(0, 1]"}},
		{"NaN", func(c *engine.Config) { c.Audit = math.NaN() }, []string{"Config.Audit = NaN"}},
		{"infinite", func(c *engine.Config) { c.Audit = math.Inf(1) }, []string{"Config.Audit = +Inf"}},
		{"too small to sample", func(c *engine.Config) { c.Audit = 1e-300 }, []string{"Config.Audit = 1e-300", "below 2^-63"}},
		{"max keys negative", func(c *engine.Config) { c.Audit = 0.5; c.AuditMaxKeys = -1 }, []string{"Config.AuditMaxKeys = -1", "1 … 16777216"}},
		{"max keys too many", func(c *engine.Config) { c.Audit = 0.5; c.AuditMaxKeys = engine.MaxAuditMaxKeys + 1 }, []string{"Config.AuditMaxKeys = 16777217"}},
		{"max entries negative", func(c *engine.Config) { c.Audit = 0.5; c.AuditMaxEntries = -3 }, []string{"Config.AuditMaxEntries = -3", "1 … 1073741824"}},
		{"buffer not a power of two", func(c *engine.Config) { c.Audit = 0.5; c.AuditBuffer = 100 }, []string{"Config.AuditBuffer = 100", "power of two in 64 … 16777216"}},
		{"buffer too small", func(c *engine.Config) { c.Audit = 0.5; c.AuditBuffer = 32 }, []string{"Config.AuditBuffer = 32"}},
		{"buffer too large", func(c *engine.Config) { c.Audit = 0.5; c.AuditBuffer = 1 << 25 }, []string{"Config.AuditBuffer = 33554432"}},
		{"buffer negative", func(c *engine.Config) { c.Audit = 0.5; c.AuditBuffer = -64 }, []string{"Config.AuditBuffer = -64"}},
		{"cap without audit", func(c *engine.Config) { c.AuditMaxKeys = 5 }, []string{"Config.AuditMaxKeys is set but Config.Audit is 0"}},
		{"buffer without audit", func(c *engine.Config) { c.AuditBuffer = 64 }, []string{"Config.AuditBuffer is set but Config.Audit is 0"}},
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
	// The edges are accepted, and Config reports the defaults.
	for _, share := range []float64{math.Ldexp(1, -63), 1e-9, 1} {
		e, err := engine.New(engine.Config{Limit: 1, Window: time.Second, Audit: share, AuditBuffer: engine.MinAuditBuffer})
		require.NoError(t, err, "Audit = %v", share)
		c := e.Config()
		require.Equal(t, engine.DefaultAuditMaxKeys, c.AuditMaxKeys)
		require.Equal(t, int64(engine.DefaultAuditMaxEntries), c.AuditMaxEntries)
		require.Equal(t, engine.MinAuditBuffer, c.AuditBuffer)
		again, err := engine.New(c) // what Config returns is a valid Config
		require.NoError(t, err)
		require.Equal(t, c, again.Config())
		require.NoError(t, again.Close())
		require.NoError(t, e.Close())
	}
}

// Validation errors name the field and the range.
func TestAuditConfigErrors(t *testing.T) {
	base := engine.Config{Limit: 10, Window: time.Second}
	cases := []struct {
		name string
		mod  func(*engine.Config)
		want []string
	}{
		{"entries without audit", func(c *engine.Config) { c.AuditMaxEntries = 5 }, []string{"Config.AuditMaxEntries"}},
		{"entries too many", func(c *engine.Config) { c.Audit = 1; c.AuditMaxEntries = engine.MaxAuditMaxEntries + 1 }, []string{"Config.AuditMaxEntries = 1073741825", "1 … 1073741824"}},
		{"neg inf", func(c *engine.Config) { c.Audit = math.Inf(-1) }, []string{"Config.Audit = -Inf", "(0, 1]"}},
		{"denormal", func(c *engine.Config) { c.Audit = 5e-324 }, []string{"Config.Audit = 5e-324"}},
		{"just below 2^-63", func(c *engine.Config) { c.Audit = math.Nextafter(math.Ldexp(1, -63), 0) }, []string{"Config.Audit", "2^-63"}},
		{"just above 1", func(c *engine.Config) { c.Audit = math.Nextafter(1, 2) }, []string{"Config.Audit", "(0, 1]"}},
		{"buffer 0 power", func(c *engine.Config) { c.Audit = 1; c.AuditBuffer = 1<<24 + 1 }, []string{"Config.AuditBuffer"}},
		{"keys without audit neg", func(c *engine.Config) { c.AuditMaxKeys = -1 }, []string{"Config.AuditMaxKeys"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.mod(&cfg)
			e, err := engine.New(cfg)
			if err == nil {
				e.Close()
				t.Fatalf("accepted %+v", cfg)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// accepted edges
	for _, a := range []float64{math.Copysign(0, -1), math.Nextafter(1, 0), math.Ldexp(1, -63)} {
		e, err := engine.New(engine.Config{Limit: 1, Window: time.Second, Audit: a})
		if err != nil {
			t.Errorf("Audit = %v refused: %v", a, err)
			continue
		}
		e.Close()
	}
}
