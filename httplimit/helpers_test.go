package httplimit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// t0 is aligned to a 10 s window, so FixedWindow waits are exact.
var t0 = time.Unix(1_700_000_000, 0)

func newEngine(t testing.TB, cfg engine.Config) (*engine.Engine, *engine.ManualClock) {
	t.Helper()
	clk := engine.NewManualClock(t0)
	cfg.Clock = clk
	if cfg.Window == 0 {
		cfg.Window = 10 * time.Second
	}
	if cfg.Limit == 0 {
		cfg.Limit = 5
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, clk
}

// mustMiddleware is NewMiddleware for options a test knows to be valid.
func mustMiddleware(t testing.TB, l any, opts ...Option) *Middleware {
	t.Helper()
	m, err := NewMiddleware(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok")
})

// do serves one request through h with a recorder, from remote.
func do(h http.Handler, remote string, mod func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	if mod != nil {
		mod(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// serveReal starts a real server for h and returns a function making GET
// requests to it, from 127.0.0.1.
func serveReal(t *testing.T, h http.Handler) func() *http.Response {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return func() *http.Response {
		t.Helper()
		resp, _ := get(t, srv.Client(), srv.URL, nil)
		return resp
	}
}

// get makes a real request to srv.
func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// wantHeader checks every field line of k: want lists them in order, and
// no want means the field is absent.
func wantHeader(t *testing.T, h http.Header, k string, want ...string) {
	t.Helper()
	got := h.Values(k)
	if len(got) != len(want) {
		t.Errorf("%s = %q, want %q", k, got, want)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s = %q, want %q", k, got, want)
			return
		}
	}
}
