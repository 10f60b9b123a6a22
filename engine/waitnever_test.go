package engine_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestWaitNeverSaysWhy: Wait's ErrNeverAdmitted names the cause that
// applies, and only that one. Near 2262 with n = 1 and the clock in range
// it once blamed n and the clock; it must say that the room comes only
// after the last representable instant.
func TestWaitNeverSaysWhy(t *testing.T) {
	near2262 := time.Unix(0, math.MaxInt64-int64(300*time.Millisecond))
	cases := []struct {
		name    string
		clock   time.Time
		fill    bool
		n       int64
		keyLim  int64 // KeyLimit's answer; 0: no KeyLimit
		want    string
		notWant []string
	}{
		{"room past 2262", near2262, true, 1, 0, "only after 2262-04-11T23:47:16.854775807Z", []string{"n must be", "n is", "clock reads a time before"}},
		{"n above the limit", t0, false, 3, 0, "(limit 2): n is above the key's limit", []string{"2262-04-11T23:47:16.854775807Z, the last", "clock reads a time"}},
		{"n negative", t0, false, -1, 0, "n is negative", []string{"above the key's limit", "clock reads a time"}},
		{"clock out of range", time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), false, 1, 0, "before 1970 or after 2262-04-11", []string{"n is"}},
		{"bad KeyLimit", t0, false, 1, -5, "Config.KeyLimit returned a limit outside", []string{"n is", "clock reads a time"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := engine.Config{Limit: 2, Window: time.Second, Clock: engine.NewManualClock(c.clock), DisableEviction: true}
			if c.keyLim != 0 {
				cfg.KeyLimit = func(string) int64 { return c.keyLim }
			}
			e := newEngine(t, cfg)
			if c.fill && !e.AllowN("k", 2).Allowed {
				t.Fatal("fill refused")
			}
			d, err := e.Wait(context.Background(), "k", c.n)
			if !errors.Is(err, engine.ErrNeverAdmitted) || d.Reason() != engine.ReasonNever {
				t.Fatalf("Wait: %+v, %v; want ErrNeverAdmitted", d, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) {
				t.Fatalf("message %q does not say %q", msg, c.want)
			}
			for _, bad := range c.notWant {
				if strings.Contains(msg, bad) {
					t.Fatalf("message %q blames %q, which does not apply", msg, bad)
				}
			}
		})
	}
}
