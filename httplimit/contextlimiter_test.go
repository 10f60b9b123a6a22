package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

type ctxKey struct{}

// newRemote is a ContextLimiter answering from next that records, per
// call, the key, the ctxKey value of its context and ctx.Err().
func newRemote(next func(key string, n int64) (engine.Decision, error)) *adaptertest.Remote {
	return &adaptertest.Remote{Next: next, Trace: func(ctx context.Context) string {
		v, _ := ctx.Value(ctxKey{}).(string)
		return v
	}}
}

// TestContextLimiter: a ContextLimiter is accepted as directly as an
// engine; its decisions are served like the engine's, the request's
// context reaches it, and an error follows the Decision returned with it,
// counted as its own outcome.
func TestContextLimiter(t *testing.T) {
	var d engine.Decision
	var err error
	f := newRemote(func(string, int64) (engine.Decision, error) { return d, err })
	m := mustMiddleware(t, f, WithPolicyName("shared", 10*time.Second))
	var calls int
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls++
		_, _ = w.Write([]byte("ok"))
	})
	// A value put in the request's context upstream must reach AllowN.
	tagged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.Handler(next).ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, r.Header.Get("X-Trace"))))
	})
	srv := httptest.NewServer(tagged)
	defer srv.Close()
	call := func(trace string) (*http.Response, string) {
		return get(t, srv.Client(), srv.URL, map[string]string{"X-Trace": trace})
	}

	// Backend answers: admitted, then limited. No Config: no t= when admitted.
	d, err = engine.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
	resp, body := call("a")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("admitted: %d %q", resp.StatusCode, body)
	}
	wantHeader(t, resp.Header, "RateLimit-Policy", `"shared";q=10;w=10`)
	wantHeader(t, resp.Header, "RateLimit", `"shared";r=9`)
	d, err = engine.Decision{Limit: 10, Remaining: 0, RetryAfter: 2500 * time.Millisecond}, nil
	resp, body = call("b")
	if resp.StatusCode != 429 || body != "rate limited; retry after 3 s\n" {
		t.Fatalf("limited: %d %q", resp.StatusCode, body)
	}
	wantHeader(t, resp.Header, "Retry-After", "3")
	wantHeader(t, resp.Header, "RateLimit", `"shared";r=0;t=3`)

	// Backend fails; its policy admitted (fail-open, or a local fallback).
	d, err = engine.Decision{Allowed: true, Limit: 10, Remaining: 9}, adaptertest.ErrBackend
	resp, body = call("c")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("fail-open: %d %q", resp.StatusCode, body)
	}
	wantHeader(t, resp.Header, "RateLimit")
	wantHeader(t, resp.Header, "RateLimit-Policy")

	// Backend fails; its policy refused with a wait (fail-closed): 503.
	d, err = engine.Decision{Limit: 10, RetryAfter: time.Second}, adaptertest.ErrBackend
	resp, body = call("d")
	if resp.StatusCode != 503 || body != "rate limiter unavailable; retry after 1 s\n" {
		t.Fatalf("fail-closed: %d %q", resp.StatusCode, body)
	}
	wantHeader(t, resp.Header, "Retry-After", "1")
	wantHeader(t, resp.Header, "RateLimit")

	// Refused with no finite wait: 503 without Retry-After.
	d, err = engine.Decision{Limit: 10, RetryAfter: engine.Never}, adaptertest.ErrBackend
	resp, body = call("e")
	if resp.StatusCode != 503 || body != "rate limiter unavailable\n" {
		t.Fatalf("never: %d %q", resp.StatusCode, body)
	}
	wantHeader(t, resp.Header, "Retry-After")
	d, err = engine.Decision{}, context.Canceled // a zero Decision: no wait either
	resp, _ = call("f")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("zero decision: %d %v", resp.StatusCode, resp.Header)
	}
	// JSON body.
	d, err = engine.Decision{Limit: 10, RetryAfter: time.Second}, adaptertest.ErrBackend
	resp, body = get(t, srv.Client(), srv.URL, map[string]string{"Accept": "application/json"})
	if resp.StatusCode != 503 || body != `{"error":"rate limiter unavailable","retry_after_seconds":1}`+"\n" {
		t.Fatalf("json: %d %q", resp.StatusCode, body)
	}

	if calls != 2 {
		t.Fatalf("next handler ran %d times, want 2", calls)
	}
	if s := m.Stats(); s != (Stats{Allowed: 1, Denied: 1, Errors: 5}) {
		t.Fatalf("stats %+v, want Allowed 1, Denied 1, Errors 5", s)
	}
	if got := strings.Join(f.Traces, ","); got != "a,b,c,d,e,f," {
		t.Fatalf("contexts seen: %q", got)
	}
	if f.Keys[0] != "127.0.0.1" {
		t.Fatalf("key %q", f.Keys[0])
	}
	mh := httptest.NewRecorder()
	MetricsHandler(m, nil).ServeHTTP(mh, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(mh.Body.String(), `ringlimit_requests_total{outcome="error"} 5`+"\n") {
		t.Fatalf("metrics:\n%s", mh.Body.String())
	}
}

// TestContextLimiterSeesCancellation: the context is the request's own,
// so a client that goes away cancels the backend call, and the failed
// decision is counted Canceled with no handler run.
func TestContextLimiterSeesCancellation(t *testing.T) {
	f := newRemote(func(string, int64) (engine.Decision, error) {
		return engine.Decision{}, context.Canceled
	})
	m := mustMiddleware(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	m.Handler(okHandler).ServeHTTP(w, r)
	if len(f.Errs) != 1 || !errors.Is(f.Errs[0], context.Canceled) {
		t.Fatalf("AllowN saw ctx.Err() = %v", f.Errs)
	}
	if w.Code != 503 || m.Stats() != (Stats{Canceled: 1}) {
		t.Fatalf("%d %+v", w.Code, m.Stats())
	}
}

// TestContextLimiterWithConfig: a ContextLimiter that reports its Config
// gets w= and the admitted t= bound from it, like the engine.
func TestContextLimiterWithConfig(t *testing.T) {
	f := &adaptertest.ConfiguredRemote{Remote: adaptertest.Remote{Next: func(string, int64) (engine.Decision, error) {
		return engine.Decision{Allowed: true, Limit: 7, Remaining: 6}, nil
	}}, Cfg: engine.Config{Limit: 7, Window: 20 * time.Second, SubWindows: 4}}
	w := do(New(f)(okHandler), "192.0.2.1:1", nil)
	wantHeader(t, w.Header(), "RateLimit-Policy", `"default";q=7;w=20`)
	wantHeader(t, w.Header(), "RateLimit", `"default";r=6;t=25`)
	if _, err := NewMiddleware(f, WithPolicyName("default", time.Second)); err == nil {
		t.Fatal("a window disagreeing with the limiter's Config was accepted")
	}
}

// TestLimiterConfigWithoutWindowIsRefused guards a limiter whose Config
// reports Window 0: it was accepted and advertised t=0 ("the quota is free
// now") on every admitted response.
func TestLimiterConfigWithoutWindowIsRefused(t *testing.T) {
	f := &adaptertest.ConfiguredRemote{Remote: adaptertest.Remote{Next: func(string, int64) (engine.Decision, error) {
		return engine.Decision{Allowed: true, Limit: 7, Remaining: 6}, nil
	}}}
	_, err := NewMiddleware(f)
	if err == nil || err.Error() != "httplimit: NewMiddleware: the limiter's Config().Window = 0s, want > 0" {
		t.Fatalf("%v", err)
	}
}
