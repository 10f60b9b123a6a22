package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// httplimit over Redis, unchanged: *Limiter is a ReservingLimiter, so
// WithInFlight and WithSettle hold units in Redis across the handler.

// gate is a handler that signals when a request has started and waits
// until the test lets it finish, or its context ends.
type gate struct{ started, release chan struct{} }

func newGate() *gate { return &gate{started: make(chan struct{}, 16), release: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.started <- struct{}{}
	select {
	case <-g.release:
	case <-r.Context().Done():
	}
	_, _ = io.WriteString(w, "ok")
}

func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// serve runs one request from remote through h; with ctx when not nil.
func serve(h http.Handler, remote string, ctx context.Context) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	if ctx != nil {
		r = r.WithContext(ctx)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func serveAsync(h http.Handler, remote string, ctx context.Context) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() { out <- serve(h, remote, ctx) }()
	return out
}

func inFlightLimiter(t *testing.T, s *redistest.Server, limit int64) *Limiter {
	return mustNew(t, client(t, s), engine.Config{Limit: limit, Window: time.Minute, SubWindows: 12, Algorithm: engine.SlidingWindowStrict})
}

// Slow handlers fill the limit; a request beyond it is refused; each that
// returns gives its unit back in Redis, and at the end Redis holds none.
func TestHTTPInFlightOverRedis(t *testing.T) {
	s := redistest.Start(t)
	l := inFlightLimiter(t, s, 2)
	m, err := httplimit.NewMiddleware(l, httplimit.WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	h := m.Handler(g)
	a, b := serveAsync(h, "192.0.2.1:1", nil), serveAsync(h, "192.0.2.1:2", nil)
	within(t, g.started, "first")
	within(t, g.started, "second")
	if w := serve(h, "192.0.2.1:3", nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a third request in flight: %d, want 429", w.Code)
	}
	g.release <- struct{}{}
	var rest <-chan *httptest.ResponseRecorder
	select {
	case <-a:
		rest = b
	case <-b:
		rest = a
	case <-time.After(20 * time.Second):
		t.Fatal("no request returned")
	}
	c := serveAsync(h, "192.0.2.1:4", nil)
	within(t, g.started, "third")
	if w := serve(h, "192.0.2.1:5", nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("with two in flight again: %d", w.Code)
	}
	close(g.release)
	within(t, c, "third's answer")
	within(t, rest, "second's answer")
	waitUntil(t, "every unit back", func() bool { return storedUnits(t, l.client, l, "192.0.2.1") == 0 }, func() any { return m.Stats() })
	if st := m.Stats(); st.Allowed != 3 || st.Denied != 2 || st.SettleErrors != 0 {
		t.Fatalf("Stats %+v", st)
	}
}

// A panicking handler's unit goes back; so does a request whose client
// hung up mid-handler (the give-back runs without the request's
// cancellation).
func TestHTTPInFlightPanicAndCancelOverRedis(t *testing.T) {
	s := redistest.Start(t)
	l := inFlightLimiter(t, s, 1)
	m, err := httplimit.NewMiddleware(l, httplimit.WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	boom := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	for i := range 3 {
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Fatalf("request %d: recovered %v", i, p)
				}
			}()
			serve(boom, "192.0.2.1:1", nil)
		}()
		if got := storedUnits(t, l.client, l, "192.0.2.1"); got != 0 {
			t.Fatalf("after panic %d: Redis holds %d units", i, got)
		}
	}
	g := newGate()
	h := m.Handler(g)
	cctx, cancel := context.WithCancel(context.Background())
	out := serveAsync(h, "192.0.2.1:2", cctx)
	within(t, g.started, "the request")
	if got := storedUnits(t, l.client, l, "192.0.2.1"); got != 1 {
		t.Fatalf("in flight: Redis holds %d units, want 1", got)
	}
	cancel() // the client hangs up
	within(t, out, "the cancelled request")
	if got := storedUnits(t, l.client, l, "192.0.2.1"); got != 0 {
		t.Fatalf("after the client hung up: Redis holds %d units, want 0", got)
	}
	if st := m.Stats(); st.SettleErrors != 0 {
		t.Fatalf("Stats %+v", st)
	}
}

// A hijacked connection keeps its unit (its lease, Window, ends it).
func TestHTTPInFlightHijackKeepsUnitOverRedis(t *testing.T) {
	s := redistest.Start(t)
	l := inFlightLimiter(t, s, 1)
	m, err := httplimit.NewMiddleware(l, httplimit.WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = buf.Flush()
		_ = conn.Close()
	})))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
		t.Fatal(err)
	}
	within(t, done, "the handler")
	waitUntil(t, "the middleware to finish", func() bool { return m.Stats().Allowed == 1 }, func() any { return m.Stats() })
	if got := storedUnits(t, l.client, l, "127.0.0.1"); got != 1 {
		t.Fatalf("after a hijack: Redis holds %d units, want 1 (kept until its lease ends)", got)
	}
}

// A replica that dies holding units (it never gives them back) blocks its
// tenant only until the lease ends: Window, plus up to one sub-window
// with SlidingWindowStrict.
func TestInFlightLeaseExpiresOverRedis(t *testing.T) {
	s := redistest.Start(t)
	const sub = 50 * time.Millisecond
	l := mustNew(t, client(t, s), engine.Config{Limit: 1, Window: 4 * sub, SubWindows: 4, Algorithm: engine.SlidingWindowStrict})
	dead, err := l.Reserve(ctx, "tenant", 1) // its replica dies: never cancelled
	if err != nil || dead.Units() != 1 {
		t.Fatal(dead, err)
	}
	r, err := l.Reserve(ctx, "tenant", 1)
	if err != nil || r.Decision().Allowed {
		t.Fatalf("a second request while the first is held: %+v %v", r.Decision(), err)
	}
	if ra := r.Decision().RetryAfter; ra <= 0 || ra > 5*sub {
		t.Fatalf("RetryAfter %v, want within Window + one sub-window", ra)
	}
	time.Sleep(time.Until(dead.At().Add(5 * sub)))
	if r, err := l.Reserve(ctx, "tenant", 1); err != nil || !r.Decision().Allowed {
		t.Fatalf("after the lease: %+v %v, want admitted", r.Decision(), err)
	}
}

// WithSettle over Redis: the estimate is reserved, and the handler's
// reported cost is what Redis holds after it.
func TestHTTPSettleOverRedis(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	m, err := httplimit.NewMiddleware(l, httplimit.WithSettle(), httplimit.WithCost(func(*http.Request) int64 { return 100 }))
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for i, actual := range []int64{40, 100, 250, 0} {
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := httplimit.ReportCost(r.Context(), actual); err != nil {
				t.Error(err)
			}
		}))
		if w := serve(h, "192.0.2.9:1", nil); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		want += actual
		if got := storedUnits(t, l.client, l, "192.0.2.9"); got != want {
			t.Fatalf("after a report of %d: Redis holds %d, want %d", actual, got, want)
		}
	}
	if st := m.Stats(); st.SettleErrors != 0 {
		t.Fatalf("Stats %+v", st)
	}
}

// NewMulti, all or nothing across an engine and Redis: a per-IP rate on
// the engine and a per-tenant in-flight limit on Redis; a request refused
// by the rate gives its in-flight unit back, and one refused in flight
// gives back its rate unit.
func TestHTTPMultiRateAndInFlightOverRedis(t *testing.T) {
	s := redistest.Start(t)
	rate, err := engine.New(engine.Config{Limit: 3, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if err != nil {
		t.Fatal(err)
	}
	defer rate.Close()
	flight := inFlightLimiter(t, s, 1)
	tenant := httplimit.KeyByHeader("X-Tenant", httplimit.MissingReject)
	m, err := httplimit.NewMulti([]httplimit.Policy{
		{Name: "flight", Limiter: flight, Key: tenant, InFlight: true},
		{Name: "rate", Limiter: rate},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	h := m.Handler(g)
	withTenant := func(remote string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr, r.Header = remote, http.Header{"X-Tenant": {"acme"}}
		return r
	}
	first := make(chan int, 1)
	go func() { w := httptest.NewRecorder(); h.ServeHTTP(w, withTenant("192.0.2.1:1")); first <- w.Code }()
	within(t, g.started, "the first request")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, withTenant("192.0.2.2:1")) // refused in flight
	if w.Code != http.StatusTooManyRequests || rate.AllowN("192.0.2.2", 0).Remaining != 3 {
		t.Fatalf("refused in flight: %d, rate left %d, want 429 and the rate unit back", w.Code, rate.AllowN("192.0.2.2", 0).Remaining)
	}
	close(g.release)
	if code := within(t, first, "the first answer"); code != http.StatusOK {
		t.Fatalf("first: %d", code)
	}
	for range 2 { // the rate of 192.0.2.1: 3 in all
		w := httptest.NewRecorder()
		h.ServeHTTP(w, withTenant("192.0.2.1:2"))
		if w.Code != http.StatusOK {
			t.Fatalf("%d", w.Code)
		}
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, withTenant("192.0.2.1:3")) // refused by the rate
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("past the rate: %d", w.Code)
	}
	if got := storedUnits(t, flight.client, flight, "acme"); got != 0 {
		t.Fatalf("Redis holds %d in-flight units of the tenant, want 0", got)
	}
}

// While Redis is down, FallbackLocal's in-flight admissions hold their
// units in the local engine, and the middleware gives them back there
// when the handler returns: the in-flight limit holds locally, and does
// not turn into one request per unit per Window.
func TestHTTPInFlightFallbackLocal(t *testing.T) {
	l := mustNew(t, deadClient(t), engine.Config{Limit: 2, Window: time.Minute, SubWindows: 12, Algorithm: engine.SlidingWindowStrict}, WithFallbackLocal(1))
	m, err := httplimit.NewMiddleware(l, httplimit.WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	h := m.Handler(g)
	a, b := serveAsync(h, "192.0.2.1:1", nil), serveAsync(h, "192.0.2.1:2", nil)
	within(t, g.started, "first")
	within(t, g.started, "second")
	if w := serve(h, "192.0.2.1:3", nil); w.Code == http.StatusOK {
		t.Fatalf("a third request in flight, locally: %d, want refused", w.Code)
	}
	close(g.release)
	within(t, a, "first's answer")
	within(t, b, "second's answer")
	if got := l.local.AllowN("192.0.2.1", 0).Remaining; got != 2 {
		t.Fatalf("the local engine after the handlers returned: remaining %d, want 2", got)
	}
	for i := range 5 {
		if w := serve(h, "192.0.2.1:4", nil); w.Code != http.StatusOK {
			t.Fatalf("sequential request %d: %d, want 200 (each gives its unit back)", i, w.Code)
		}
	}
	if st := m.Stats(); st.SettleErrors != 0 || st.Errors == 0 {
		t.Fatalf("Stats %+v: want the policy answers counted as Errors, no settle errors", st)
	}
}
