package httplimit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// t0 is the instant every test engine starts at (adaptertest.T0, aligned
// to a 10 s window, so FixedWindow waits are exact).
var t0 = adaptertest.T0

// newEngine is an engine on a ManualClock at t0: Window 10 s and Limit 5
// unless cfg says otherwise.
func newEngine(t testing.TB, cfg engine.Config) (*engine.Engine, *engine.ManualClock) {
	t.Helper()
	return adaptertest.NewEngine(t, cfg, 5)
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
	adaptertest.WantValues(t, k, h.Values(k), want...)
}

// checkMembers checks RateLimit-Policy and RateLimit: one member per
// policy, in order, with q and r, parsed independently of the writer.
func checkMembers(t *testing.T, h http.Header, names []string, q, r []int64) {
	t.Helper()
	if msg := adaptertest.CheckMembers(h.Values("RateLimit-Policy"), h.Values("RateLimit"), names, q, r); msg != "" {
		t.Error(msg)
	}
}

// keyOf is k's key for a request from remote with the header fields hdr;
// an error fails the test.
func keyOf(t *testing.T, k Key, remote string, hdr http.Header) string {
	t.Helper()
	s, err := k.Of(request(remote, hdr))
	if err != nil {
		t.Fatalf("key(%q, %v): %v", remote, hdr, err)
	}
	return s
}

// keyErr is k's error for a request from remote with the header fields hdr.
func keyErr(t *testing.T, k Key, remote string, hdr http.Header) error {
	t.Helper()
	_, err := k.Of(request(remote, hdr))
	return err
}

func request(remote string, hdr http.Header) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for name, vs := range hdr {
		r.Header[name] = vs
	}
	return r
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func limitEngine(t *testing.T, limit int64, alg engine.Algorithm) *engine.Engine {
	t.Helper()
	e, _ := adaptertest.NewEngine(t, engine.Config{Algorithm: alg}, limit)
	return e
}

func doCatch(h http.Handler, remote string, mod func(*http.Request)) (w *httptest.ResponseRecorder, panicked any) {
	w = httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	if mod != nil {
		mod(r)
	}
	defer func() { panicked = recover() }()
	h.ServeHTTP(w, r)
	return w, nil
}

func remainingOf(e *engine.Engine, key string) int64 { return e.AllowN(key, 0).Remaining }
