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
	m := NewMiddleware(e, WithPolicy("default", 10*time.Second))
	srv := httptest.NewServer(m.Handler(okHandler))
	defer srv.Close()
	c := srv.Client()

	var denied int
	for i := range 6 {
		resp, body := get(t, c, srv.URL, nil)
		wantHeader(t, resp.Header, "RateLimit-Policy", `"default";q=5;w=10`)
		switch resp.StatusCode {
		case http.StatusOK:
			if body != "ok" {
				t.Fatalf("body %q", body)
			}
			wantHeader(t, resp.Header, "RateLimit", `"default";r=`+string(rune('0'+4-i))+`;t=10`)
			if resp.Header.Get("Retry-After") != "" {
				t.Error("Retry-After on an admitted response")
			}
		case http.StatusTooManyRequests:
			denied++
			if i != 5 {
				t.Fatalf("request %d denied", i)
			}
			wantHeader(t, resp.Header, "Retry-After", "10")
			wantHeader(t, resp.Header, "RateLimit", `"default";r=0;t=10`)
			if body != "rate limited; retry after 10 s\n" {
				t.Errorf("body %q", body)
			}
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if denied != 1 {
		t.Fatalf("denied %d, want 1", denied)
	}
	// Retry-After rounds up: 7.5 s left → 8.
	clk.Advance(2500 * time.Millisecond)
	resp, _ := get(t, c, srv.URL, nil)
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

func TestNoWindowOmitsWAndT(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Algorithm: engine.FixedWindow})
	h := New(e)(okHandler)
	w := do(h, "192.0.2.1:1", nil)
	wantHeader(t, w.Header(), "RateLimit-Policy", `"default";q=5`)
	wantHeader(t, w.Header(), "RateLimit", `"default";r=4`)
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
	e, _ := newEngine(t, engine.Config{})
	var cost int64 = 3
	m := NewMiddleware(e, WithCost(func(*http.Request) int64 { return cost }))
	h := m.Handler(okHandler)
	w := do(h, "192.0.2.1:1", nil)
	if w.Code != 200 {
		t.Fatal(w.Code)
	}
	wantHeader(t, w.Header(), "RateLimit", `"default";r=2`)
	if w := do(h, "192.0.2.1:1", nil); w.Code != 429 {
		t.Fatalf("second cost-3: %d", w.Code)
	}
	cost = 6
	w = do(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusRequestEntityTooLarge || w.Body.String() != "request cost 6 exceeds the limit 5 per window\n" {
		t.Fatalf("cost 6: %d %q", w.Code, w.Body.String())
	}
	cost = 0
	if w := do(h, "192.0.2.1:1", nil); w.Code != 400 {
		t.Fatalf("cost 0: %d", w.Code)
	}
	if s := m.Stats(); s != (Stats{Allowed: 1, Denied: 1, Rejected: 2}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestKeyError(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	if w := do(New(e)(okHandler), "not an address", nil); w.Code != 400 {
		t.Fatalf("default key, bad RemoteAddr: %d", w.Code)
	}
	h := New(e, WithKey(KeyByHeader("X-Api-Key", MissingReject)))(okHandler)
	if w := do(h, "192.0.2.1:1", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "X-Api-Key") {
		t.Fatalf("missing header: %d %q", w.Code, w.Body.String())
	}
	var got error
	h = New(e,
		WithKey(func(*http.Request) (string, error) { return "", errors.New("boom") }),
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
	m := NewMiddleware(e, WithExempt(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))
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

func TestLegacyHeaders(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Algorithm: engine.FixedWindow})
	h := New(e, WithHeaders(HeadersDraft|HeadersLegacy), WithPolicy("per-ip", 10*time.Second))(okHandler)
	w := do(h, "192.0.2.1:1", nil)
	wantHeader(t, w.Header(), "X-RateLimit-Limit", "5")
	wantHeader(t, w.Header(), "X-RateLimit-Remaining", "4")
	wantHeader(t, w.Header(), "X-RateLimit-Reset", "10")
	wantHeader(t, w.Header(), "RateLimit", `"per-ip";r=4;t=10`)
	h = New(e, WithHeaders(HeadersLegacy))(okHandler)
	w = do(h, "192.0.2.2:1", nil)
	wantHeader(t, w.Header(), "X-RateLimit-Remaining", "4")
	if w.Header().Get("RateLimit") != "" || w.Header().Get("X-RateLimit-Reset") != "" {
		t.Fatalf("unexpected headers %v", w.Header())
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
}

func TestMaxKeys503(t *testing.T) {
	e, _ := newEngine(t, engine.Config{MaxKeys: 1})
	m := NewMiddleware(e)
	h := m.Handler(okHandler)
	if w := do(h, "192.0.2.1:1", nil); w.Code != 200 {
		t.Fatal(w.Code)
	}
	w := do(h, "192.0.2.2:1", nil)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "12" {
		t.Fatalf("%d Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if s := m.Stats(); s != (Stats{Allowed: 1, Denied: 1}) {
		t.Fatalf("stats %+v", s)
	}
}
