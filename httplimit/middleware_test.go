package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func TestLimitPlusOneOverRealServer(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Algorithm: engine.FixedWindow})
	m := mustMiddleware(t, e)
	srv := httptest.NewServer(m.Handler(okHandler))
	defer srv.Close()
	c := srv.Client()

	for i := range 5 {
		resp, body := get(t, c, srv.URL, nil)
		if resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		wantHeader(t, resp.Header, "RateLimit-Policy", `"default";q=5;w=10`)
		wantHeader(t, resp.Header, "RateLimit", `"default";r=`+string(rune('0'+4-i))+`;t=10`)
		wantHeader(t, resp.Header, "Retry-After")
	}
	resp, body := get(t, c, srv.URL, nil)
	if resp.StatusCode != http.StatusTooManyRequests || body != "rate limited; retry after 10 s\n" {
		t.Fatalf("6th: %d %q", resp.StatusCode, body)
	}
	wantHeader(t, resp.Header, "Retry-After", "10")
	wantHeader(t, resp.Header, "RateLimit-Policy", `"default";q=5;w=10`)
	wantHeader(t, resp.Header, "RateLimit", `"default";r=0;t=10`)
	// Retry-After rounds up: 7.5 s left → 8.
	clk.Advance(2500 * time.Millisecond)
	resp, _ = get(t, c, srv.URL, nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d", resp.StatusCode)
	}
	wantHeader(t, resp.Header, "Retry-After", "8")
	wantHeader(t, resp.Header, "RateLimit", `"default";r=0;t=8`)
	clk.Advance(7500 * time.Millisecond)
	if resp, _ := get(t, c, srv.URL, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the window: status %d", resp.StatusCode)
	}
	if s := m.Stats(); s != (Stats{Allowed: 6, Denied: 2}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestTwoIPsIndependent(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	h := New(e)(okHandler)
	for range 5 {
		if w := do(h, "192.0.2.1:1000", nil); w.Code != 200 {
			t.Fatalf("A: %d", w.Code)
		}
	}
	if w := do(h, "192.0.2.1:2000", nil); w.Code != 429 {
		t.Fatalf("A, other port: %d, want 429", w.Code)
	}
	if w := do(h, "192.0.2.2:1000", nil); w.Code != 200 {
		t.Fatalf("B: %d", w.Code)
	}
	// An IPv4-mapped IPv6 peer is the same client as its IPv4 address.
	if w := do(h, "[::ffff:192.0.2.1]:3000", nil); w.Code != 429 {
		t.Fatalf("mapped A: %d, want 429", w.Code)
	}
}

func TestCost(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Algorithm: engine.FixedWindow})
	var cost int64 = 3
	m := mustMiddleware(t, e, WithCost(func(*http.Request) int64 { return cost }))
	h := m.Handler(okHandler)
	w := do(h, "192.0.2.1:1", nil)
	if w.Code != 200 {
		t.Fatal(w.Code)
	}
	wantHeader(t, w.Header(), "RateLimit", `"default";r=2;t=10`)
	if w := do(h, "192.0.2.1:1", nil); w.Code != 429 {
		t.Fatalf("second cost-3: %d", w.Code)
	}
	cost = 6
	w = do(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusRequestEntityTooLarge || w.Body.String() != "request cost 6 exceeds the limit 5 per window\n" {
		t.Fatalf("cost 6: %d %q", w.Code, w.Body.String())
	}
	// Cost 0 is a free request: admitted, charging nothing.
	cost = 0
	w = do(h, "192.0.2.1:1", nil)
	if w.Code != 200 {
		t.Fatalf("cost 0: %d, want 200", w.Code)
	}
	wantHeader(t, w.Header(), "RateLimit", `"default";r=2;t=10`)
	// A negative cost is the cost function's bug: 500, not the client's 400.
	cost = -1
	if w := do(h, "192.0.2.1:1", nil); w.Code != 500 || w.Body.String() != "rate limit misconfigured: negative request cost\n" {
		t.Fatalf("cost -1: %d %q", w.Code, w.Body.String())
	}
	if s := m.Stats(); s != (Stats{Allowed: 2, Denied: 1, Rejected: 2}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestKeyError(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	if w := do(New(e)(okHandler), "not an address", nil); w.Code != 400 {
		t.Fatalf("default key, bad RemoteAddr: %d", w.Code)
	}
	h := New(e, WithKey(KeyByHeader("X-Api-Key", MissingReject)))(okHandler)
	if w := do(h, "192.0.2.1:1", nil); w.Code != 400 || w.Body.String() != "httplimit: missing header X-Api-Key\n" {
		t.Fatalf("missing header: %d %q", w.Code, w.Body.String())
	}
	var got error
	h = New(e,
		WithKey(KeyFunc(func(*http.Request) (string, error) { return "", errors.New("boom") })),
		WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			got = err
			w.WriteHeader(http.StatusUnauthorized)
		}))(okHandler)
	if w := do(h, "192.0.2.1:1", nil); w.Code != 401 || got == nil || got.Error() != "boom" {
		t.Fatalf("custom handler: %d %v", w.Code, got)
	}
}

func TestExempt(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1})
	m := mustMiddleware(t, e, WithExempt(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))
	h := m.Handler(okHandler)
	for range 3 {
		r := httptest.NewRequest("GET", "/healthz", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Fatalf("exempt: %d %v", w.Code, w.Header())
		}
	}
	if s := m.Stats(); s != (Stats{}) {
		t.Fatalf("exempt counted: %+v", s)
	}
	do(h, "192.0.2.1:1", nil)
	if w := do(h, "192.0.2.1:1", nil); w.Code != 429 {
		t.Fatalf("limited path: %d", w.Code)
	}
}

func TestDenyBodyByAccept(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	h := New(e)(okHandler)
	do(h, "192.0.2.1:1", nil)
	for _, c := range []struct {
		accept, ctype, body string
	}{
		{"application/json", "application/json", `{"error":"rate limited","retry_after_seconds":10}` + "\n"},
		{"text/html, application/json;q=0.9, */*;q=0.1", "application/json", `{"error":"rate limited","retry_after_seconds":10}` + "\n"},
		{"", "text/plain; charset=utf-8", "rate limited; retry after 10 s\n"},
		{"*/*", "text/plain; charset=utf-8", "rate limited; retry after 10 s\n"},
		{"text/plain, application/json;q=0.5", "text/plain; charset=utf-8", "rate limited; retry after 10 s\n"},
	} {
		w := do(h, "192.0.2.1:1", func(r *http.Request) {
			if c.accept != "" {
				r.Header.Set("Accept", c.accept)
			}
		})
		if w.Code != 429 || w.Header().Get("Content-Type") != c.ctype || w.Body.String() != c.body {
			t.Errorf("Accept %q: %d %q %q", c.accept, w.Code, w.Header().Get("Content-Type"), w.Body.String())
		}
	}
}

func TestCustomDenyHandler(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	h := New(e, WithDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := DecisionFrom(r.Context())
		if !ok || d.Allowed || d.RetryAfter != 10*time.Second {
			t.Errorf("DecisionFrom: %+v %v", d, ok)
		}
		w.WriteHeader(http.StatusTeapot)
	})))(okHandler)
	do(h, "192.0.2.1:1", nil)
	w := do(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusTeapot || w.Header().Get("Retry-After") != "10" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	wantHeader(t, w.Header(), "RateLimit", `"default";r=0;t=10`)
}

func TestMaxKeys503(t *testing.T) {
	e, _ := newEngine(t, engine.Config{MaxKeys: 1})
	m := mustMiddleware(t, e)
	h := m.Handler(okHandler)
	if w := do(h, "192.0.2.1:1", nil); w.Code != 200 {
		t.Fatal(w.Code)
	}
	w := do(h, "192.0.2.2:1", nil)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "12" || w.Body.String() != "too many clients; retry after 12 s\n" {
		t.Fatalf("%d Retry-After %q %q", w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
	if s := m.Stats(); s != (Stats{Allowed: 1, Denied: 1}) {
		t.Fatalf("stats %+v", s)
	}
}

// TestMisconfigurationFailsAtConstruction: every bad option or key
// argument is an error from NewMiddleware that names it and its range,
// and a panic from New with the same message; none reaches a request.
func TestMisconfigurationFailsAtConstruction(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	trusted := testTrusted
	for _, c := range []struct {
		name string
		l    any
		opt  Option
		want string
	}{
		{"KeyByIP(200)", e, WithKey(KeyByIP(200)), "httplimit: WithKey: KeyByIP ipv6Prefix = 200, want 1 … 128 (0 for 64)"},
		{"KeyByIP(-1)", e, WithKey(KeyByIP(-1)), "httplimit: WithKey: KeyByIP ipv6Prefix = -1, want 1 … 128 (0 for 64)"},
		{"KeyByRoute(nil)", e, WithKey(KeyByRoute(nil, KeyByIP(64))), "httplimit: WithKey: KeyByRoute routeFunc is nil (pass httplimit.RoutePattern for the ServeMux pattern)"},
		{"KeyByRoute bad inner", e, WithKey(KeyByRoute(RoutePattern, KeyByIP(129))), "httplimit: WithKey: KeyByRoute inner: KeyByIP ipv6Prefix = 129, want 1 … 128 (0 for 64)"},
		{"KeyByHeader empty", e, WithKey(KeyByHeader("", MissingReject)), `httplimit: WithKey: KeyByHeader name = "", want a header field name (1 … 256 RFC 9110 token characters)`},
		{"KeyByHeader space", e, WithKey(KeyByHeader("X Api", MissingReject)), `httplimit: WithKey: KeyByHeader name = "X Api", want a header field name (1 … 256 RFC 9110 token characters)`},
		{"MissingFallback bad", e, WithKey(KeyByHeader("X-Api-Key", MissingFallback(KeyByIP(300)))), "httplimit: WithKey: KeyByHeader(X-Api-Key) MissingFallback: KeyByIP ipv6Prefix = 300, want 1 … 128 (0 for 64)"},
		{"MissingFallback zero", e, WithKey(KeyByHeader("X-Api-Key", MissingFallback(Key{}))), "httplimit: WithKey: KeyByHeader(X-Api-Key) MissingFallback: the zero Key (build one with KeyByIP, KeyByHeader, … or KeyFunc)"},
		{"Compose()", e, WithKey(Compose()), "httplimit: WithKey: Compose needs at least one part"},
		{"Compose bad part", e, WithKey(Compose(KeyByIP(64), KeyFunc(nil))), "httplimit: WithKey: Compose part 1: KeyFunc(nil)"},
		{"zero Key", e, WithKey(Key{}), "httplimit: WithKey: the zero Key (build one with KeyByIP, KeyByHeader, … or KeyFunc)"},
		{"XFF no trusted", e, WithKey(KeyByXForwardedFor(nil, 64)), "httplimit: WithKey: KeyByXForwardedFor trusted is empty, want the prefixes of your reverse proxies (with no proxy, use KeyByIP)"},
		{"XFF trust all", e, WithKey(KeyByXForwardedFor(mustPrefixes("0.0.0.0/0"), 64)), "httplimit: WithKey: KeyByXForwardedFor trusted[0] = 0.0.0.0/0 trusts every address, so any client could choose its key; want your proxies' prefixes (length ≥ 1)"},
		{"Forwarded trust all v6", e, WithKey(KeyByForwarded(mustPrefixes("10.0.0.0/8", "::/0"), 64)), "httplimit: WithKey: KeyByForwarded trusted[1] = ::/0 trusts every address, so any client could choose its key; want your proxies' prefixes (length ≥ 1)"},
		{"Forwarded trust all mapped", e, WithKey(KeyByForwarded(mustPrefixes("::ffff:0.0.0.0/96"), 64)), "httplimit: WithKey: KeyByForwarded trusted[0] = ::ffff:0.0.0.0/96 trusts every address, so any client could choose its key; want your proxies' prefixes (length ≥ 1)"},
		{"XFF invalid prefix", e, WithKey(KeyByXForwardedFor(append(trusted, netipPrefixZero), 64)), "httplimit: WithKey: KeyByXForwardedFor trusted[2] = invalid Prefix is not a valid prefix"},
		{"XFF bad ipv6Prefix", e, WithKey(KeyByXForwardedFor(trusted, 129)), "httplimit: WithKey: KeyByXForwardedFor ipv6Prefix = 129, want 1 … 128 (0 for 64)"},
		{"WithKeyErrorHandler(nil)", e, WithKeyErrorHandler(nil), "httplimit: WithKeyErrorHandler(nil), want a handler"},
		{"WithCost(nil)", e, WithCost(nil), "httplimit: WithCost(nil), want a cost function"},
		{"WithDenyHandler(nil)", e, WithDenyHandler(nil), "httplimit: WithDenyHandler(nil), want a handler"},
		{"WithExempt(nil)", e, WithExempt(nil), "httplimit: WithExempt(nil), want a function"},
		{"WithHeaders(4)", e, WithHeaders(4), "httplimit: WithHeaders(4), want a combination of HeadersDraft (1) and HeadersLegacy (2), or 0"},
		{"WithHeadersBelow(0)", e, WithHeadersBelow(0), "httplimit: WithHeadersBelow(0), want 0 < share ≤ 1"},
		{"WithHeadersBelow(1.5)", e, WithHeadersBelow(1.5), "httplimit: WithHeadersBelow(1.5), want 0 < share ≤ 1"},
		{"WithPolicy empty name", e, WithPolicy("", 0), `httplimit: WithPolicy name = "", want 1 … 64 printable ASCII characters`},
		{"WithPolicy control byte", e, WithPolicy("a\nb", 0), `httplimit: WithPolicy name = "a?b" has byte 0xa at 1, want printable ASCII (0x20 … 0x7e)`},
		{"WithPolicy negative window", e, WithPolicy("p", -time.Second), "httplimit: WithPolicy window = -1s, want 0 (the limiter's) or > 0"},
		{"WithPolicy window mismatch", e, WithPolicy("p", 5*time.Second), "httplimit: WithPolicy window = 5s, but the limiter's Config().Window = 10s; pass 0 to take the limiter's"},
		{"nil option", e, nil, "httplimit: NewMiddleware: option 0 is nil"},
		{"nil limiter", nil, WithPolicy("p", 0), "httplimit: NewMiddleware: nil limiter (<nil>)"},
		{"typed nil limiter", (*engine.Engine)(nil), WithPolicy("p", 0), "httplimit: NewMiddleware: nil limiter (*engine.Engine)"},
		{"not a limiter", "engine", WithPolicy("p", 0), "httplimit: NewMiddleware: string is not a limiter; want AllowN(key string, n int64) engine.Decision (Limiter, as *engine.Engine) or AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) (ContextLimiter, as *redisstore.Limiter)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := NewMiddleware(c.l, c.opt)
			if err == nil || err.Error() != c.want || m != nil {
				t.Fatalf("NewMiddleware: %v, %v\nwant error %q", m, err, c.want)
			}
			defer func() {
				if p := recover(); p == nil || p.(error).Error() != c.want {
					t.Fatalf("New: panic %v, want %q", p, c.want)
				}
			}()
			New(c.l, c.opt)
			t.Fatal("New did not panic")
		})
	}
	// Several bad options: all reported.
	_, err := NewMiddleware(e, WithCost(nil), WithHeadersBelow(2))
	if err == nil || err.Error() != "httplimit: WithCost(nil), want a cost function\nhttplimit: WithHeadersBelow(2), want 0 < share ≤ 1" {
		t.Fatalf("joined: %v", err)
	}
	if !strings.Contains(KeyByIP(200).Err().Error(), "ipv6Prefix = 200") || KeyByIP(64).Err() != nil {
		t.Fatal("Key.Err")
	}
}

// TestBadKeyIsNotAClientError is the case: KeyByIP(200) and
// KeyByRoute(nil, …) used to build, and answered every request 400.
func TestBadKeyIsNotAClientError(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	for _, k := range []Key{KeyByIP(200), KeyByRoute(nil, KeyByIP(64))} {
		if _, err := NewMiddleware(e, WithKey(k)); err == nil {
			t.Fatal("built")
		}
		// Even used directly, the bad Key answers its configuration error.
		if _, err := k.Of(httptest.NewRequest("GET", "/", nil)); err == nil || err != k.Err() {
			t.Fatalf("Of: %v", err)
		}
	}
}
