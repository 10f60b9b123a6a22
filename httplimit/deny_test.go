package httplimit

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestKeyError: a request whose key cannot be built is 400 with the
// Key's message, or what WithKeyErrorHandler writes.
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

// TestDenyBodyByAccept: the 429 body is JSON when Accept prefers it,
// plain text otherwise.
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

// TestCustomDenyHandler: WithDenyHandler writes the refusal, with the
// Decision in the request's context and the fields already set.
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

// TestMaxKeys503: a new key refused by MaxKeys is 503 with the engine's
// Retry-After, counted Denied.
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
