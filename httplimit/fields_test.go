package httplimit

import (
	"net/http"
	"net/netip"
	"strconv"
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
		policy string // WithPolicy name
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
			m := mustMiddleware(t, e, WithPolicy(c.policy, c.window), WithCost(func(r *http.Request) int64 {
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
					reset = f.AdmittedReset()
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

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

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
	if f.AdmittedReset() != -1 {
		t.Errorf("AdmittedReset without a Config = %d, want -1", f.AdmittedReset())
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
		{e, "", 0, "httplimit: WithPolicy name = \"\", want 1 … 64 printable ASCII characters"},
		{e, "x", time.Minute, "httplimit: WithPolicy window = 1m0s, but the limiter's Config().Window = 10s; pass 0 to take the limiter's"},
		{e, "x", -time.Second, "httplimit: WithPolicy window = -1s, want 0 (the limiter's) or > 0"},
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

// TestProxyChainMatchesKey: adapter.ProxyChain.Key (what grpclimit's keys
// run) gives the key (or the error) that KeyByXForwardedFor and
// KeyByForwarded give for the same peer and header lines.
func TestProxyChainMatchesKey(t *testing.T) {
	xc, err := adapter.NewProxyChain("httplimit: ", "KeyByXForwardedFor", "X-Forwarded-For", testTrusted, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := adapter.NewProxyChain("httplimit: ", "KeyByForwarded", "Forwarded", testTrusted, 56, true)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("10.0.0.1, ", MaxProxyHops) + "203.0.113.5"
	for _, c := range []struct {
		remote string
		lines  []string
	}{
		{"198.51.100.9:1", []string{"1.2.3.4"}},
		{"10.0.0.1:1", []string{"1.2.3.4, 203.0.113.5, 10.0.0.2"}},
		{"10.0.0.1:1", []string{"203.0.113.5, 10.0.0.3", "10.0.0.2"}},
		{"10.0.0.1:1", nil},
		{"10.0.0.1:1", []string{" , "}},
		{"[fd00::1]:1", []string{"2001:db8:a:b::1"}},
		{"[::ffff:10.0.0.1]:1", []string{"::ffff:203.0.113.5"}},
		{"10.0.0.1:1", []string{"garbage"}},
		{"10.0.0.1:1", []string{long}},
		{"10.0.0.1:1", []string{`for=198.51.100.7;proto=https, for="[2001:db8:a:b::1]:4711"`}},
		{"10.0.0.1:1", []string{`for=unknown`}},
		{"10.0.0.1:1", []string{`for="1.2.3.4, for=10.0.0.2`}},
		{"10.0.0.1:1", []string{strings.Repeat("x", 100) + ", 203.0.113.77"}},
	} {
		peer := netip.MustParseAddrPort(c.remote).Addr()
		for _, p := range []struct {
			chain adapter.ProxyChain
			key   Key
			hdr   string
		}{
			{xc, KeyByXForwardedFor(testTrusted, 64), "X-Forwarded-For"},
			{fc, KeyByForwarded(testTrusted, 56), "Forwarded"},
		} {
			got, gotErr := p.chain.Key(peer.Unmap().WithZone(""), "", c.lines)
			r, _ := http.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.remote
			if c.lines != nil {
				r.Header[p.hdr] = c.lines
			}
			want, wantErr := p.key.Of(r)
			if got != want || errText(gotErr) != errText(wantErr) {
				t.Errorf("%s from %s %q: Key = %q, %v; the Key's Of = %q, %v", p.hdr, c.remote, c.lines, got, gotErr, want, wantErr)
			}
		}
	}
	if _, err := adapter.NewProxyChain("httplimit: ", "KeyByXForwardedFor", "X-Forwarded-For", nil, 64, false); err == nil || !strings.Contains(err.Error(), "KeyByXForwardedFor trusted is empty") {
		t.Errorf("no trusted prefixes: %v", err)
	}
	if _, err := adapter.NewProxyChain("httplimit: ", "KeyByForwarded", "Forwarded", testTrusted, 129, true); err == nil || !strings.Contains(err.Error(), "KeyByForwarded ipv6Prefix = 129") {
		t.Errorf("ipv6Prefix 129: %v", err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
