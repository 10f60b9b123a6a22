package httplimit

import (
	"math"
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

// A cost function that passes a caller's number through (a header, a body
// size) can ask for math.MaxInt64: it is 413, never admitted, on a
// SlidingLog key holding a unit and on keys whose limit SetLimit lowered
// below what they hold, through NewMiddleware and NewMulti (AllowAll).
// Before, the engine's comparison wrapped and the handler ran (200).
func TestCostNearMaxInt64IsTooLarge(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, lowered := range []bool{false, true} {
			e, _ := newEngine(t, engine.Config{Algorithm: alg, PerKeyLimits: true})
			var cost int64 = 4
			costFn := WithCost(func(*http.Request) int64 { return cost })
			single := mustMiddleware(t, e, costFn).Handler(okHandler)
			multi, err := NewMulti([]Policy{{Name: "ip", Limiter: e}}, costFn)
			if err != nil {
				t.Fatal(err)
			}
			if w := do(single, "192.0.2.1:1", nil); w.Code != 200 {
				t.Fatalf("%v: cost 4: %d", alg, w.Code)
			}
			limit := "5"
			if lowered {
				if err := e.SetLimit("192.0.2.1", 2); err != nil {
					t.Fatal(err)
				}
				limit = "2"
			}
			for _, cost = range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 3} {
				for name, h := range map[string]http.Handler{"NewMiddleware": single, "NewMulti": multi.Handler(okHandler)} {
					w := do(h, "192.0.2.1:1", nil)
					want := "request cost " + itoa(cost) + " exceeds the limit " + limit + " per window\n"
					if w.Code != http.StatusRequestEntityTooLarge || w.Body.String() != want {
						t.Errorf("%v lowered=%v %s cost %d: %d %q, want 413 %q", alg, lowered, name, cost, w.Code, w.Body.String(), want)
					}
				}
			}
		}
	}
}
