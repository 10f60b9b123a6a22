package httplimit

import (
	"net/http"
	"net/http/httptest"
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

// TestAdmittedPathAllocations pins the middleware's own allocations on
// the admitted path: the RateLimit value and the header slices' backing
// array. RateLimit-Policy comes from the cache.
func TestAdmittedPathAllocations(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: engine.MaxLimit})
	h := New(e)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:4711"
	w := &headerOnly{h: http.Header{}}
	allocs := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	if allocs > 2 {
		t.Fatalf("%v allocations per admitted request, want ≤ 2", allocs)
	}
}

type headerOnly struct{ h http.Header }

func (w *headerOnly) Header() http.Header { return w.h }

func (w *headerOnly) Write(b []byte) (int, error) { return len(b), nil }

func (w *headerOnly) WriteHeader(int) {}
