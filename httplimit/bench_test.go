package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// BenchmarkMiddleware compares a bare handler with the middleware on the
// admitted path. Each iteration uses a fresh httptest.NewRecorder, as a
// server gives each request a fresh header map; the allocs/op delta
// between the two is the middleware's own cost. The comparison with
// go-chi/httprate lives in bench/peers (its own module).
func BenchmarkMiddleware(b *testing.B) {
	e, err := engine.New(engine.Config{Limit: engine.MaxLimit, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	bare := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	run := func(b *testing.B, h http.Handler, hdr http.Header) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:4711"
		for k, v := range hdr {
			r.Header[k] = v
		}
		var w *httptest.ResponseRecorder
		b.ReportAllocs()
		for b.Loop() {
			w = httptest.NewRecorder()
			h.ServeHTTP(w, r)
		}
		if w.Code != http.StatusNoContent {
			b.Fatalf("status %d", w.Code)
		}
	}
	xffChain := func(forged int) http.Header {
		return http.Header{"X-Forwarded-For": {strings.Repeat("198.51.100.1, ", forged) + "203.0.113.5, 10.0.0.2"}}
	}
	trusted := mustPrefixes("10.0.0.0/8")
	b.Run("bare", func(b *testing.B) { run(b, bare, nil) })
	b.Run("middleware", func(b *testing.B) { run(b, New(e)(bare), nil) })
	b.Run("middleware-below", func(b *testing.B) { run(b, New(e, WithHeadersBelow(0.1))(bare), nil) })
	b.Run("middleware-legacy", func(b *testing.B) {
		run(b, New(e, WithHeaders(HeadersDraft|HeadersLegacy))(bare), nil)
	})
	b.Run("middleware-apikey", func(b *testing.B) {
		run(b, New(e, WithKey(KeyByHeader("X-Api-Key", MissingReject)))(bare), http.Header{"X-Api-Key": {"k1"}})
	})
	// Units held across the handler: given back after it (in flight), or
	// settled to a cost the handler reports (one fewer than the
	// estimate, so that every request settles).
	b.Run("middleware-inflight", func(b *testing.B) { run(b, New(e, WithInFlight())(bare), nil) })
	reporting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = ReportCost(r.Context(), 1)
		w.WriteHeader(http.StatusNoContent)
	})
	two := func(*http.Request) int64 { return 2 }
	b.Run("middleware-cost2", func(b *testing.B) { run(b, New(e, WithCost(two))(bare), nil) })
	b.Run("middleware-settle", func(b *testing.B) { run(b, New(e, WithCost(two), WithSettle())(reporting), nil) })
	for _, forged := range []int{0, 10_000} {
		name := "middleware-xff/forged=" + map[int]string{0: "0", 10_000: "10000"}[forged]
		b.Run(name, func(b *testing.B) {
			run(b, New(e, WithKey(KeyByXForwardedFor(trusted, 64)))(bare), xffChain(forged))
		})
	}
}
