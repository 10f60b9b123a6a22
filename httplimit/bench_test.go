package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// BenchmarkMiddleware compares a bare handler with the middleware on the
// admitted path. Each iteration uses a fresh httptest.NewRecorder, as a
// server gives each request a fresh header map; the allocs/op delta
// between the two is the middleware's own cost.
func BenchmarkMiddleware(b *testing.B) {
	e, err := engine.New(engine.Config{Limit: engine.MaxLimit, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	bare := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	run := func(b *testing.B, h http.Handler) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:4711"
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
	b.Run("bare", func(b *testing.B) { run(b, bare) })
	b.Run("middleware", func(b *testing.B) {
		run(b, New(e, WithPolicy("default", time.Hour))(bare))
	})
	b.Run("middleware-legacy", func(b *testing.B) {
		run(b, New(e, WithPolicy("default", time.Hour), WithHeaders(HeadersDraft|HeadersLegacy))(bare))
	})
	b.Run("middleware-apikey", func(b *testing.B) {
		r := New(e, WithPolicy("default", time.Hour), WithKey(KeyByHeader("X-Api-Key", MissingReject)))(bare)
		run(b, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			req.Header["X-Api-Key"] = []string{"k1"}
			r.ServeHTTP(w, req)
		}))
	})
}
