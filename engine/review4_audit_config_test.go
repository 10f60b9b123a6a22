package engine_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Validation errors name the field and the range.
func TestReview4AuditConfigErrors(t *testing.T) {
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
