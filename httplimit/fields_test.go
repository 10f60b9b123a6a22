package httplimit

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

// TestFieldsMatchMiddleware drives a Middleware and an adapter.Fields (what
// grpclimit sends as metadata) over the same limiter configuration through
// admitted, limited and too-costly requests, and checks that Fields gives
// the values the Middleware wrote.
func TestFieldsMatchMiddleware(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    engine.Config
		policy string // WithPolicyName name
		window time.Duration
	}{
		{"sliding 10s", engine.Config{Limit: 3, Window: 10 * time.Second}, "per-ip", 0},
		{"strict 3s", engine.Config{Limit: 3, Window: 3 * time.Second, Algorithm: engine.SlidingWindowStrict}, "default", 0},
		{"fixed 10s", engine.Config{Limit: 3, Window: 10 * time.Second, Algorithm: engine.FixedWindow}, `q"uo\te`, 0},
		{"log 10s", engine.Config{Limit: 3, Window: 10 * time.Second, Algorithm: engine.SlidingLog}, "log", 10 * time.Second},
		{"sub-second: no w=", engine.Config{Limit: 3, Window: 100 * time.Millisecond}, "fast", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newEngine(t, c.cfg)
			m := mustMiddleware(t, e, WithPolicyName(c.policy, c.window), WithCost(func(r *http.Request) int64 {
				if r.Header.Get("X-Big") != "" {
					return 4
				}
				return 1
			}))
			f, err := adapter.NewFields("httplimit: ", "NewFields", e, c.policy, c.window)
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(okHandler)
			for i := range 5 {
				w := do(h, "192.0.2.1:1", nil)
				d := e.AllowN("192.0.2.1", 0) // the same state, read without charge
				var reset int64
				switch w.Code {
				case 200:
					reset = f.AdmittedReset(0)
				case 429:
					reset = adapter.RetrySeconds(e.AllowN("192.0.2.1", 1).RetryAfter)
					wantHeader(t, w.Header(), "Retry-After", itoa(reset))
				default:
					t.Fatalf("request %d: %d", i, w.Code)
				}
				wantHeader(t, w.Header(), "RateLimit-Policy", f.Policy(d.Limit))
				wantHeader(t, w.Header(), "RateLimit", f.RateLimit(d.Remaining, reset))
			}
			w := do(h, "192.0.2.9:1", func(r *http.Request) { r.Header.Set("X-Big", "1") })
			if w.Code != 413 {
				t.Fatalf("cost 4: %d", w.Code)
			}
			wantHeader(t, w.Header(), "RateLimit", f.RateLimit(3, -1))
			if !strings.Contains(f.Policy(3), ";q=3") {
				t.Errorf("Policy(3) = %q", f.Policy(3))
			}
		})
	}
}

func TestFieldsValues(t *testing.T) {
	f, err := adapter.NewFields("httplimit: ", "NewFields", nil, "tenant", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{f.Policy(100), `"tenant";q=100;w=30`},
		{f.RateLimit(7, 12), `"tenant";r=7;t=12`},
		{f.RateLimit(-3, -1), `"tenant";r=0`},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
	if f.AdmittedReset(0) != -1 {
		t.Errorf("AdmittedReset without a Config = %d, want -1", f.AdmittedReset(0))
	}
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{{0, 1}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {engine.Never, 9223372037}} {
		if got := adapter.RetrySeconds(c.d); got != c.want {
			t.Errorf("RetrySeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestNewFieldsErrors(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	var nilEngine *engine.Engine
	if _, err := adapter.NewFields("httplimit: ", "NewFields", nilEngine, "x", time.Second); err != nil {
		t.Errorf("a nil *engine.Engine is a limiter without Config: %v", err)
	}
	for _, c := range []struct {
		l      any
		name   string
		window time.Duration
		want   string
	}{
		{e, "", 0, "httplimit: WithPolicyName name = \"\", want 1 … 64 printable ASCII characters"},
		{e, "x", time.Minute, "httplimit: WithPolicyName window = 1m0s, but the limiter's Config().Window = 10s; pass 0 to take the limiter's"},
		{e, "x", -time.Second, "httplimit: WithPolicyName window = -1s, want 0 (the limiter's) or > 0"},
		{zeroWindow{}, "x", 0, "httplimit: NewFields: the limiter's Config().Window = 0s, want > 0"},
	} {
		_, err := adapter.NewFields("httplimit: ", "NewFields", c.l, c.name, c.window)
		if err == nil || err.Error() != c.want {
			t.Errorf("NewFields(%T, %q, %v) = %v, want %q", c.l, c.name, c.window, err, c.want)
		}
	}
}

type zeroWindow struct{}

func (zeroWindow) Config() engine.Config { return engine.Config{} }
