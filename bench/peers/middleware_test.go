package peers

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/httprate"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
)

// The HTTP middleware comparison: ringlimit's httplimit against
// go-chi/httprate, each keying by the client IP in front of the same
// handler, on the admitted path (fastLimit per hour). Run it with
//
//	go test -run '^$' -bench HTTPMiddleware -benchmem -count 6 . | tee out/mw.txt
//	go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da -col /mw out/mw.txt
//
// (run.sh leaves it out: it is not a Limiter table).

// jsonBody is a small API answer, so that the handler writes a header
// and a body like a real one.
var jsonBody = []byte(`{"id":42,"name":"widget","tags":["a","b","c"],"price":{"amount":1999,"currency":"EUR"}}` + "\n")

// apiHandler is the realistic handler both middlewares wrap.
var apiHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(jsonBody)
})

// httprateByIP is httprate.KeyByIP without its deprecation (it keys by
// RemoteAddr exactly so, IPv6 by /64), like httplimit's default key.
func httprateByIP(r *http.Request) (string, error) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(ip), nil
}

// middlewares returns the compared handlers; limit and window are per IP.
func middlewares(tb testing.TB, limit int64, window time.Duration) []struct {
	name string
	h    http.Handler
} {
	e, err := engine.New(engine.Config{Limit: limit, Window: window})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Close() })
	return []struct {
		name string
		h    http.Handler
	}{
		{"bare", apiHandler},
		{"ringlimit", httplimit.New(e)(apiHandler)},
		{"httprate", httprate.LimitBy(int(limit), window, httprateByIP)(apiHandler)},
	}
}

// TestHTTPMiddlewaresLimit: both middlewares, configured as the benchmark
// configures them but with 2 per hour, admit 2 requests per IP and refuse
// the third, so the benchmark measures working limiters.
func TestHTTPMiddlewaresLimit(t *testing.T) {
	for _, mw := range middlewares(t, 2, time.Hour)[1:] {
		for _, ip := range []string{"192.0.2.1", "192.0.2.2"} {
			for i, want := range []int{200, 200, 429} {
				r := httptest.NewRequest("GET", "/item/42", nil)
				r.RemoteAddr = ip + ":4711"
				w := httptest.NewRecorder()
				mw.h.ServeHTTP(w, r)
				if w.Code != want {
					t.Fatalf("%s, %s, request %d: %d, want %d", mw.name, ip, i, w.Code, want)
				}
			}
		}
	}
}

// BenchmarkHTTPMiddleware: one admitted request per op, with a fresh
// ResponseRecorder per request (a server gives each request a fresh header
// map). clients=1: one goroutine, one IP. clients=1000: b.RunParallel over
// 1,000 IPs.
func BenchmarkHTTPMiddleware(b *testing.B) {
	for _, mw := range middlewares(b, fastLimit, fastWindow) {
		b.Run("mw="+mw.name+"/clients=1", func(b *testing.B) {
			r := httptest.NewRequest("GET", "/item/42", nil)
			r.RemoteAddr = "192.0.2.1:4711"
			var w *httptest.ResponseRecorder
			b.ReportAllocs()
			for b.Loop() {
				w = httptest.NewRecorder()
				mw.h.ServeHTTP(w, r)
			}
			if w.Code != http.StatusOK {
				b.Fatalf("status %d", w.Code)
			}
		})
		b.Run("mw="+mw.name+"/clients=1000", func(b *testing.B) {
			reqs := make([]*http.Request, 1000)
			for i := range reqs {
				reqs[i] = httptest.NewRequest("GET", "/item/42", nil)
				reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":4711"
			}
			var next, bad atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919)) // a per-goroutine start, spread over the IPs
				for pb.Next() {
					w := httptest.NewRecorder()
					mw.h.ServeHTTP(w, reqs[i%len(reqs)])
					if w.Code != http.StatusOK {
						bad.Add(1)
					}
					i++
				}
			})
			if bad.Load() != 0 {
				b.Fatalf("%d requests not admitted", bad.Load())
			}
		})
	}
}
