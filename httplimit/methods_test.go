package httplimit

import (
	"net/http"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

// TestEveryMethodIsCounted: HEAD and OPTIONS are requests like GET: keyed
// and charged, so a CORS preflight costs the client a unit unless it is
// exempted (docs/http.md, the recipe below).
func TestEveryMethodIsCounted(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 3, Algorithm: engine.FixedWindow})
	h := New(e)(okHandler)
	var codes []int
	for _, method := range []string{http.MethodHead, http.MethodOptions, http.MethodGet, http.MethodGet} {
		codes = append(codes, do(h, "192.0.2.1:1", func(r *http.Request) { r.Method = method }).Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 200 || codes[3] != 429 {
		t.Errorf("HEAD, OPTIONS, GET, GET: %v, want the fourth request limited", codes)
	}
}

// TestExemptPreflightAndHealthChecks: the docs' WithExempt recipe lets
// CORS preflights and the health check through without a charge, and
// still limits a plain OPTIONS and every other request.
func TestExemptPreflightAndHealthChecks(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	m := mustMiddleware(t, e,
		WithExempt(func(r *http.Request) bool { // a CORS preflight
			return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != ""
		}),
		WithExempt(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
	)
	h := m.Handler(okHandler)
	preflight := func(r *http.Request) {
		r.Method = http.MethodOptions
		r.Header.Set("Origin", "https://app.example")
		r.Header.Set("Access-Control-Request-Method", "POST")
	}
	for range 3 {
		if w := do(h, "192.0.2.1:1", preflight); w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Fatalf("preflight: %d, RateLimit %q; want exempt", w.Code, w.Header().Get("RateLimit"))
		}
		if w := do(h, "192.0.2.1:1", func(r *http.Request) { r.URL.Path = "/healthz" }); w.Code != 200 {
			t.Fatalf("health check: %d", w.Code)
		}
	}
	if w := do(h, "192.0.2.1:1", nil); w.Code != 200 {
		t.Errorf("the first GET after the exempt requests: %d, want 200 (they charged nothing)", w.Code)
	}
	if w := do(h, "192.0.2.1:1", func(r *http.Request) { r.Method = http.MethodOptions }); w.Code != 429 {
		t.Errorf("an OPTIONS that is not a preflight: %d, want 429", w.Code)
	}
	if s := m.Stats(); s.Allowed != 1 || s.Denied != 1 {
		t.Errorf("stats %+v: the exempt requests were counted", s)
	}
}
