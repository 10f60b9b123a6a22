package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// httplimit.WithInFlight: "the middleware reserves a request's cost before
// the handler and gives it back when the handler returns, normally or by a
// panic, so that Limit is the most units ... running at once per key";
// README: "cancel it when the handler returns or panics, on a context
// without the request's cancellation". Two replicas' middlewares over one
// redis-server, handlers that return, panic (also http.ErrAbortHandler) or
// see their client hang up, all at once: never more than Limit handlers
// run at once, and every unit comes back exactly once (Redis ends at 0).
func TestHTTPInFlightMixedEndingsOverRedis(t *testing.T) {
	s := redistest.Start(t)
	const limit = 4
	var running, peak, served atomic.Int64
	errc := make(chan error, 64)
	var hs []http.Handler
	var ls []*Limiter
	var ms []*httplimit.Middleware
	for range 2 {
		l := inFlightLimiter(t, s, limit)
		m, err := httplimit.NewMiddleware(l, httplimit.WithInFlight())
		if err != nil {
			t.Fatal(err)
		}
		ls, ms = append(ls, l), append(ms, m)
		hs = append(hs, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := running.Add(1)
			defer running.Add(-1)
			served.Add(1)
			if now > limit {
				errc <- fmt.Errorf("%d handlers running at once, limit %d", now, limit)
			}
			for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
			}
			switch r.Header.Get("X-End") {
			case "panic":
				panic("boom")
			case "abort":
				panic(http.ErrAbortHandler)
			case "hangup":
				<-r.Context().Done()
			default:
				time.Sleep(time.Millisecond) // a slow handler, so that the limit fills
			}
		})))
	}
	ends := []string{"", "panic", "abort", "hangup"}
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 40 {
				h := hs[rng.IntN(len(hs))]
				end := ends[rng.IntN(len(ends))]
				cctx, cancel := context.WithCancel(context.Background())
				r, _ := http.NewRequestWithContext(cctx, http.MethodGet, "/", nil)
				r.RemoteAddr = "192.0.2.9:1"
				r.Header.Set("X-End", end)
				if end == "hangup" {
					go cancel()
				}
				func() {
					defer func() { _ = recover() }()
					h.ServeHTTP(nopWriter{}, r)
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if got := storedUnits(t, ls[0].client, ls[0], "192.0.2.9"); got != 0 {
		t.Fatalf("Redis holds %d units after every request ended, want 0", got)
	}
	for i, m := range ms {
		if st := m.Stats(); st.SettleErrors != 0 {
			t.Fatalf("middleware %d: %+v", i, st)
		}
	}
	t.Logf("served %d, peak running %d", served.Load(), peak.Load())
	if served.Load() < 50 || peak.Load() < 2 {
		t.Fatalf("the run did not contend: served %d, peak %d", served.Load(), peak.Load())
	}
}

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriter) WriteHeader(int)             {}

// httplimit.WithSettle: "A handler that panics is settled to what it
// reported before the panic"; "one that reports twice is settled to the
// last report". Over Redis the count is what was reported, exactly.
func TestHTTPSettlePanicAfterReportOverRedis(t *testing.T) {
	s := redistest.Start(t)
	l := inFlightLimiter(t, s, 100)
	m, err := httplimit.NewMiddleware(l, httplimit.WithSettle(), httplimit.WithCost(func(*http.Request) int64 { return 10 }))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = httplimit.ReportCost(r.Context(), 50)
		_ = httplimit.ReportCost(r.Context(), 3)
		panic("boom")
	}))
	func() {
		defer func() { _ = recover() }()
		serve(h, "192.0.2.7:1", nil)
	}()
	if got := storedUnits(t, l.client, l, "192.0.2.7"); got != 3 {
		t.Fatalf("Redis holds %d units, want the last report 3", got)
	}
}
