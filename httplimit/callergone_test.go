package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// TestCallerGoneRunsNoHandler: a fail-open Decision that comes with an
// error while the request's context is done (cancelled, or past its
// deadline) runs no handler and is answered 503, counted Canceled, never
// Errors. Before, the failure policy's admission ran the handler uncounted.
func TestCallerGoneRunsNoHandler(t *testing.T) {
	for _, tc := range adaptertest.DoneContexts() {
		t.Run(tc.Name, func(t *testing.T) {
			m := mustMiddleware(t, &adaptertest.FailOpenOnCancel{})
			var runs int
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(tc.Ctx))
			if runs != 0 || w.Code != http.StatusServiceUnavailable {
				t.Fatalf("handler runs %d, status %d; want 0 and 503", runs, w.Code)
			}
			if s := m.Stats(); s != (Stats{Canceled: 1}) {
				t.Fatalf("Stats %+v, want Canceled 1", s)
			}
		})
	}
}

// TestDeadlinePassedIsCallerGoneNotAnError: a request whose deadline (set
// upstream) has passed, on a timer that has not fired (ctx.Err() still
// nil), is answered by redisstore as a caller who has gone: nothing
// admitted, an error wrapping context.DeadlineExceeded. The middleware
// judges it the same way: 503 "request ended before the rate limiter
// answered", counted Canceled. Before, it checked ctx.Err() alone and
// answered 503 "rate limiter unavailable", counted Errors.
func TestDeadlinePassedIsCallerGoneNotAnError(t *testing.T) {
	asRedis := adaptertest.LimiterFunc(func(ctx context.Context, _ string, _ int64) (engine.Decision, error) {
		if err := ctx.Err(); err != nil {
			return engine.Decision{}, err
		}
		return engine.Decision{Limit: 5}, fmt.Errorf("redisstore: nothing admitted, the caller's context ended before Redis answered: %w", context.DeadlineExceeded)
	})
	multi, err := NewMulti([]Policy{{Name: "a", Limiter: asRedis}})
	if err != nil {
		t.Fatal(err)
	}
	var runs int
	for name, m := range map[string]*Middleware{"NewMiddleware": mustMiddleware(t, asRedis), "NewMulti": multi} {
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(adaptertest.LateTimer(context.Background())))
		if w.Code != http.StatusServiceUnavailable || w.Body.String() != "request ended before the rate limiter answered\n" {
			t.Errorf("%s: %d %q, want 503 naming the request's end", name, w.Code, w.Body.String())
		}
		if s := m.Stats(); s != (Stats{Canceled: 1}) {
			t.Errorf("%s: Stats %+v, want Canceled 1", name, s)
		}
	}
	if runs != 0 {
		t.Errorf("the handler ran %d times", runs)
	}
}

// TestOwnTimeoutFollowsFailurePolicy: a limiter's own round-trip timeout ends a
// context derived from the request's, which stays live: that is a backend
// failure, and the failure policy's admission is followed (counted Errors).
func TestOwnTimeoutFollowsFailurePolicy(t *testing.T) {
	own := adaptertest.LimiterFunc(func(ctx context.Context, _ string, _ int64) (engine.Decision, error) {
		rt, cancel := context.WithTimeout(ctx, 0)
		defer cancel()
		<-rt.Done()
		return engine.Decision{Allowed: true}, fmt.Errorf("redis: round trip: %w", rt.Err())
	})
	m := mustMiddleware(t, own)
	var runs int
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
	do(h, "192.0.2.1:1", nil)
	if runs != 1 || m.Stats() != (Stats{Errors: 1}) {
		t.Fatalf("handler runs %d, Stats %+v; want 1 run, Errors 1", runs, m.Stats())
	}
}

// TestCallerGoneOverLoopback: real HTTP clients that cancel their requests
// while a fail-open limiter decides get no handler run, over a real
// loopback listener. The limiter holds each call until the client's
// cancel reaches the server, so the verdict does not depend on timing.
func TestCallerGoneOverLoopback(t *testing.T) {
	const clients = 20
	f := &adaptertest.FailOpenOnCancel{Block: true, Entered: make(chan struct{})}
	m := mustMiddleware(t, f)
	var runs atomic.Int64
	served := make(chan struct{}, clients) // one per request the middleware finished
	inner := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs.Add(1) }))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { served <- struct{}{} }()
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	errs := make(chan error, clients)
	for range clients {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			resp, err := srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
				err = fmt.Errorf("status %d, want the client's own cancel", resp.StatusCode)
			} else {
				err = nil
			}
			errs <- err
		}()
		<-f.Entered // the limiter is deciding this request
		cancel()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
		<-served
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("handler ran %d times for %d clients that cancelled", n, clients)
	}
	if s := m.Stats(); s != (Stats{Canceled: clients}) {
		t.Errorf("Stats %+v, want Canceled %d", s, clients)
	}
}
