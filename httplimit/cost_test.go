package httplimit

import (
	"net/http"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

// TestCost: WithCost charges its units; a cost above the limit is 413,
// cost 0 is free, and a negative cost is the server's 500.
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
