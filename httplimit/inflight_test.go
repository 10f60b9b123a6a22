package httplimit

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// gate is a handler that signals when a request has started and waits
// until the test lets it finish (or its context ends).
type gate struct {
	started chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan struct{}, 16), release: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.started <- struct{}{}
	select {
	case <-g.release:
	case <-r.Context().Done():
	}
	_, _ = io.WriteString(w, "ok")
}

// waitFor receives from ch or fails after a deadline, so that a broken
// middleware fails the test rather than hanging it.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// serveAsync serves one request in a goroutine; its recorder arrives on
// the returned channel when the middleware returns.
func serveAsync(h http.Handler, remote string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() { out <- do(h, remote, nil) }()
	return out
}

// With WithInFlight the limit counts requests running at once: two slow
// handlers fill a limit of 2, a third is refused, and each handler that
// returns gives its unit back; the window has not moved.
func TestInFlightCountsSlowRequests(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			e, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: alg})
			m := mustMiddleware(t, e, WithInFlight())
			g := newGate()
			h := m.Handler(g)
			a, b := serveAsync(h, "192.0.2.1:1"), serveAsync(h, "192.0.2.1:2")
			waitFor(t, g.started, "first")
			waitFor(t, g.started, "second")
			w := do(h, "192.0.2.1:3", nil)
			if w.Code != http.StatusTooManyRequests {
				t.Fatalf("a third request in flight: %d, want 429", w.Code)
			}
			checkMembers(t, w.Header(), []string{"default"}, []int64{2}, []int64{0})
			g.release <- struct{}{} // one of the two returns
			var rest <-chan *httptest.ResponseRecorder
			select {
			case <-a:
				rest = b
			case <-b:
				rest = a
			case <-time.After(20 * time.Second):
				t.Fatal("no request returned")
			}
			// One left: one fits again, at the same instant.
			c := serveAsync(h, "192.0.2.1:4")
			waitFor(t, g.started, "third")
			if w := do(h, "192.0.2.1:5", nil); w.Code != http.StatusTooManyRequests {
				t.Fatalf("with two in flight again: %d", w.Code)
			}
			close(g.release)
			waitFor(t, rest, "second's answer")
			waitFor(t, c, "third's answer")
			if got := e.AllowN("192.0.2.1", 0).Remaining; got != 2 {
				t.Fatalf("after every request returned: remaining %d, want 2", got)
			}
			if s := m.Stats(); s.Allowed != 3 || s.Denied != 2 || s.SettleErrors != 0 {
				t.Fatalf("Stats %+v", s)
			}
		})
	}
}

// A handler that panics has ended its request: its unit goes back, and
// the panic goes on to net/http.
func TestInFlightPanicGivesBack(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	m := mustMiddleware(t, e, WithInFlight())
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	for i := range 3 {
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Fatalf("request %d: recovered %v, want the handler's panic", i, p)
				}
			}()
			do(h, "192.0.2.1:1", nil)
		}()
		if got := e.AllowN("192.0.2.1", 0).Remaining; got != 1 {
			t.Fatalf("after panic %d: remaining %d, want 1", i, got)
		}
	}
}

// A client that cancels mid-handler: the handler returns on the context's
// end, and its unit goes back.
func TestInFlightClientCancels(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	m := mustMiddleware(t, e, WithInFlight())
	g := newGate()
	done := make(chan struct{})
	h := m.Handler(g)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done) // after the middleware has returned
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, g.started, "the handler")
	if got := e.AllowN("127.0.0.1", 0).Remaining; got != 0 {
		t.Fatalf("in flight: remaining %d, want 0", got)
	}
	cancel()
	if err := waitFor(t, errc, "the client"); err == nil {
		t.Fatal("the client's request did not fail")
	}
	waitFor(t, done, "the middleware's return")
	if got := e.AllowN("127.0.0.1", 0).Remaining; got != 1 {
		t.Fatalf("after the cancelled request: remaining %d, want 1", got)
	}
}

// A handler that hijacks the connection: the middleware cannot see when
// the connection ends, so its unit stays until the lease (Window, plus a
// sub-window for Strict) ends, and then counts no more.
func TestInFlightHijackKeepsUnitsUntilTheLease(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict, SubWindows: 10})
	m := mustMiddleware(t, e, WithInFlight())
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = bw.Flush()
		_ = c.Close()
	})))
	defer srv.Close()
	resp, body := get(t, srv.Client(), srv.URL, nil)
	if resp.StatusCode != http.StatusOK || body != "hijacked" {
		t.Fatalf("hijacked answer: %d %q", resp.StatusCode, body)
	}
	if got := e.AllowN("127.0.0.1", 0).Remaining; got != 0 {
		t.Fatalf("after the hijacker returned: remaining %d, want 0 (the lease holds it)", got)
	}
	resp, _ = get(t, srv.Client(), srv.URL, nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("during the lease: %d, want 429", resp.StatusCode)
	}
	clk.Advance(11 * time.Second) // Window + one sub-window: the lease is over
	if got := e.AllowN("127.0.0.1", 0).Remaining; got != 1 {
		t.Fatalf("after the lease: remaining %d, want 1", got)
	}
}

// A handler that hijacks through the writer's own method (not
// http.ResponseController) is seen too, and Flush still reaches the
// server's writer (streaming handlers).
func TestInFlightWriterPassesFlushAndHijack(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: engine.SlidingWindowStrict})
	m := mustMiddleware(t, e, WithInFlight())
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/flush" {
			_, _ = io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			return
		}
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_, _ = bufio.NewWriter(c).WriteString("")
		_, _ = c.Write([]byte("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"))
		_ = c.Close()
	})))
	defer srv.Close()
	if _, body := get(t, srv.Client(), srv.URL+"/flush", nil); body != "part" {
		t.Fatalf("flushed body %q", body)
	}
	if got := e.AllowN("127.0.0.1", 0).Remaining; got != 2 {
		t.Fatalf("after a flushing request: remaining %d, want 2", got)
	}
	resp, _ := get(t, srv.Client(), srv.URL+"/hijack", nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("hijacked: %d", resp.StatusCode)
	}
	if got := e.AllowN("127.0.0.1", 0).Remaining; got != 1 {
		t.Fatalf("after a hijack: remaining %d, want 1", got)
	}
}

// A per-IP rate and a per-tenant limit on requests in flight, in one
// middleware: a request the tenant's in-flight limit refuses charges the
// per-IP rate nothing, and an admitted one keeps its per-IP unit (a rate)
// while giving the tenant's back when it returns.
func TestInFlightMultiAllOrNothing(t *testing.T) {
	ipE, _ := newEngine(t, engine.Config{Limit: 10})
	tenantE, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	tenant := KeyByHeader("X-Tenant", MissingReject)
	m, err := NewMulti([]Policy{
		{Name: "per-ip", Limiter: ipE},
		{Name: "tenant", Limiter: tenantE, Key: tenant, InFlight: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	h := m.Handler(g)
	acme := func(r *http.Request) { r.Header.Set("X-Tenant", "acme") }
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- do(h, "192.0.2.1:1", acme) }()
	waitFor(t, g.started, "the first request")
	for i := range 3 {
		w := do(h, "192.0.2.1:1", acme)
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("refusal %d: %d", i, w.Code)
		}
		checkMembers(t, w.Header(), []string{"per-ip", "tenant"}, []int64{10, 1}, []int64{9, 0})
	}
	if got := ipE.AllowN("192.0.2.1", 0).Remaining; got != 9 {
		t.Fatalf("the refusals charged the per-ip rate: remaining %d, want 9", got)
	}
	close(g.release)
	waitFor(t, first, "the first's answer")
	if got := tenantE.AllowN("acme", 0).Remaining; got != 1 {
		t.Fatalf("tenant in flight after the request: %d, want 1", got)
	}
	if got := ipE.AllowN("192.0.2.1", 0).Remaining; got != 9 {
		t.Fatalf("per-ip rate after the request: %d, want 9 (a rate keeps its unit)", got)
	}
	if w := do(h, "192.0.2.1:1", acme); w.Code != http.StatusOK {
		t.Fatalf("after the first returned: %d", w.Code)
	}
	if s := m.Stats(); s.Allowed != 2 || s.Denied != 3 {
		t.Fatalf("Stats %+v", s)
	}

	// WithInFlight on NewMulti puts both in flight.
	m2, err := NewMulti([]Policy{{Name: "a", Limiter: ipE}, {Name: "b", Limiter: tenantE, Key: tenant}}, WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	if w := do(m2.Handler(okHandler), "192.0.2.9:1", acme); w.Code != http.StatusOK {
		t.Fatalf("%d", w.Code)
	}
	if got := ipE.AllowN("192.0.2.9", 0).Remaining; got != 10 {
		t.Fatalf("WithInFlight on NewMulti: per-ip remaining %d, want 10", got)
	}
}

// A shared limiter that can hold units (a ReservingLimiter) is released
// through its SettleFunc, on a context the client's leaving cannot end; a
// release it fails is counted, and its units stay.
func TestInFlightThroughAReservingLimiter(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	l := &adaptertest.Reserving{E: e}
	m := mustMiddleware(t, l, WithInFlight())
	ctx, cancel := context.WithCancel(context.Background())
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { cancel() }))
	do(h, "192.0.2.1:1", func(r *http.Request) { *r = *r.WithContext(ctx) })
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 1 || l.Settles.Load() != 1 || l.CtxDone.Load() != 0 {
		t.Fatalf("remaining %d, settles %d (%d on a done context)", got, l.Settles.Load(), l.CtxDone.Load())
	}
	l.SettleErr = adaptertest.ErrBackend
	do(m.Handler(okHandler), "192.0.2.1:1", nil)
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 0 {
		t.Fatalf("after a failed release: remaining %d, want 0 (the lease holds it)", got)
	}
	if s := m.Stats(); s.SettleErrors != 1 || s.Allowed != 2 {
		t.Fatalf("Stats %+v", s)
	}
}

// What WithInFlight and WithSettle need is checked at construction.
func TestHeldConfigErrors(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	fixed, _ := newEngine(t, engine.Config{Algorithm: engine.FixedWindow})
	plain := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		return engine.Decision{Allowed: true}, nil
	})
	for _, c := range []struct {
		name string
		l    any
		opts []Option
		want string
	}{
		{"both", e, []Option{WithInFlight(), WithSettle()}, "WithInFlight and WithSettle cannot be combined"},
		{"fixed", fixed, []Option{WithInFlight()}, "WithInFlight: the limiter's Algorithm is fixed"},
		{"plain in flight", plain, []Option{WithInFlight()}, "WithInFlight needs a limiter that can give units back or settle them after the handler"},
		{"plain settle", plain, []Option{WithSettle()}, "WithSettle needs a limiter that can give units back"},
	} {
		_, err := NewMiddleware(c.l, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	_, err := NewMulti([]Policy{{Name: "a", Limiter: e}, {Name: "b", Limiter: plain, InFlight: true}})
	if err == nil || !strings.Contains(err.Error(), `NewMulti policy 1 ("b"): WithInFlight needs`) {
		t.Errorf("NewMulti: %v", err)
	}
	if _, err := NewMiddleware(fixed, WithSettle()); err != nil {
		t.Errorf("WithSettle on FixedWindow: %v", err)
	}
}

// A hijack that fails (the writer cannot hijack: HTTP/2, a recorder) leaves
// the request an ordinary one: WithInFlight "gives it back when the handler
// returns"; only "a request whose connection the handler hijacked" keeps
// its units until the lease ends.
func TestInFlightFailedHijackGivesBack(t *testing.T) {
	e := limitEngine(t, 1, engine.SlidingWindowStrict)
	m, err := NewMiddleware(e, WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"controller", "assert"} {
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var err error
			if how == "controller" {
				_, _, err = http.NewResponseController(w).Hijack()
			} else if hj, ok := w.(http.Hijacker); ok {
				_, _, err = hj.Hijack()
			} else {
				return
			}
			if err == nil {
				t.Error("a recorder hijacked")
			}
			w.WriteHeader(http.StatusAccepted)
		}))
		w, _ := doCatch(h, "192.0.2.1:1", nil)
		if w.Code != http.StatusAccepted {
			t.Fatalf("%s: status %d", how, w.Code)
		}
		if got := remainingOf(e, "192.0.2.1"); got != 1 {
			t.Fatalf("%s: after a failed hijack the unit is held: remainingOf %d, want 1", how, got)
		}
	}
}

// The same over a real HTTP/2 server, where Hijack is not supported.
func TestInFlightFailedHijackHTTP2(t *testing.T) {
	e := limitEngine(t, 1, engine.SlidingWindowStrict)
	m, err := NewMiddleware(e, WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := http.NewResponseController(w).Hijack(); err == nil {
			t.Error("HTTP/2 hijacked")
		}
		w.WriteHeader(http.StatusAccepted)
	})))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	for i := range 3 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Skip("no HTTP/2")
		}
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("request %d: status %d (the failed hijack kept the unit)", i, resp.StatusCode)
		}
	}
}
