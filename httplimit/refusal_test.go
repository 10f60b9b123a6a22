package httplimit

import (
	"bytes"
	"context"
	"errors"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

var errBackend = errors.New("backend down")

// refusalCase is a middleware and a request that it refuses in one way.
type refusalCase struct {
	name   string
	kind   RefusalKind
	status int
	// build returns the limiter and options, and mod prepares the request
	// (nil: a plain GET from 192.0.2.1); warm requests are sent first.
	build func(t *testing.T) (any, []Option)
	warm  int
	mod   func(*http.Request) *http.Request
	check func(t *testing.T, ref Refusal, h http.Header)
}

func refusalCases() []refusalCase {
	return []refusalCase{
		{name: "over the limit", kind: RefusalLimited, status: 429, warm: 1,
			build: func(t *testing.T) (any, []Option) {
				e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
				return e, nil
			},
			check: func(t *testing.T, ref Refusal, h http.Header) {
				if ref.Decision.Allowed || ref.Decision.Limit != 1 || ref.Decision.RetryAfter != 10*time.Second || ref.RetryAfter != 10 || ref.Cost != 1 || ref.Err != nil {
					t.Errorf("refusal %+v", ref)
				}
				if h.Get("Retry-After") != "10" || h.Get("RateLimit") == "" {
					t.Errorf("headers before the handler: %v", h)
				}
			}},
		{name: "MaxKeys", kind: RefusalKeysFull, status: 503,
			build: func(t *testing.T) (any, []Option) {
				e, _ := newEngine(t, engine.Config{MaxKeys: 1})
				e.Allow("another key")
				return e, nil
			},
			check: func(t *testing.T, ref Refusal, h http.Header) {
				if ref.Decision.Reason() != engine.ReasonKeysFull || ref.RetryAfter < 1 || h.Get("Retry-After") == "" {
					t.Errorf("refusal %+v, headers %v", ref, h)
				}
			}},
		{name: "backend failed, fail-closed", kind: RefusalUnavailable, status: 503,
			build: func(t *testing.T) (any, []Option) {
				return newRemote(func(string, int64) (engine.Decision, error) {
					return engine.Decision{Limit: 5, RetryAfter: 2 * time.Second}, errBackend
				}), nil
			},
			check: func(t *testing.T, ref Refusal, h http.Header) {
				if !errors.Is(ref.Err, errBackend) || ref.RetryAfter != 2 || h.Get("Retry-After") != "2" {
					t.Errorf("refusal %+v, headers %v", ref, h)
				}
			}},
		{name: "caller gone", kind: RefusalCallerGone, status: 503,
			build: func(t *testing.T) (any, []Option) {
				return newRemote(func(string, int64) (engine.Decision, error) {
					return engine.Decision{Allowed: true}, context.Canceled
				}), nil
			},
			mod: func(r *http.Request) *http.Request {
				ctx, cancel := context.WithCancel(r.Context())
				cancel()
				return r.WithContext(ctx)
			},
			check: func(t *testing.T, ref Refusal, _ http.Header) {
				if !errors.Is(ref.Err, context.Canceled) || ref.RetryAfter != -1 {
					t.Errorf("refusal %+v", ref)
				}
			}},
		{name: "cost above the limit", kind: RefusalTooCostly, status: 413,
			build: func(t *testing.T) (any, []Option) {
				e, _ := newEngine(t, engine.Config{Limit: 3})
				return e, []Option{WithCost(func(*http.Request) int64 { return 5 })}
			},
			check: func(t *testing.T, ref Refusal, h http.Header) {
				if ref.Cost != 5 || ref.Decision.Limit != 3 || ref.RetryAfter != -1 || h.Get("Retry-After") != "" || h.Get("RateLimit-Policy") == "" {
					t.Errorf("refusal %+v, headers %v", ref, h)
				}
			}},
		{name: "missing key header", kind: RefusalBadKey, status: 400,
			build: func(t *testing.T) (any, []Option) {
				e, _ := newEngine(t, engine.Config{})
				return e, []Option{WithKey(KeyByHeader("X-Api-Key", MissingReject))}
			},
			check: func(t *testing.T, ref Refusal, _ http.Header) {
				if ref.Err == nil || ref.Err.Error() != "httplimit: missing header X-Api-Key" || ref.Decision != (engine.Decision{}) {
					t.Errorf("refusal %+v", ref)
				}
			}},
		{name: "key above the engine's cap", kind: RefusalBadKey, status: 400,
			build: func(t *testing.T) (any, []Option) {
				e, _ := newEngine(t, engine.Config{MaxKeyBytes: 4})
				return e, nil
			},
			check: func(t *testing.T, ref Refusal, _ http.Header) {
				if !errors.Is(ref.Err, errLimiterKeyTooLong) {
					t.Errorf("refusal %+v", ref)
				}
			}},
		{name: "negative cost", kind: RefusalMisconfigured, status: 500,
			build: func(t *testing.T) (any, []Option) {
				e, _ := newEngine(t, engine.Config{})
				return e, []Option{WithCost(func(*http.Request) int64 { return -1 })}
			},
			check: func(t *testing.T, ref Refusal, _ http.Header) {
				if ref.Cost != -1 || !errors.Is(ref.Err, errNegativeCost) {
					t.Errorf("refusal %+v", ref)
				}
			}},
		{name: "limit the engine rejects", kind: RefusalMisconfigured, status: 500,
			build: func(t *testing.T) (any, []Option) {
				e, _ := newEngine(t, engine.Config{KeyLimit: func(string) int64 { return -7 }})
				return e, nil
			},
			check: func(t *testing.T, ref Refusal, _ http.Header) {
				if !errors.Is(ref.Err, errLimitRejected) || ref.Cost != 1 {
					t.Errorf("refusal %+v", ref)
				}
			}},
	}
}

// serveCase sends c's warm-up requests and then its request through a
// middleware built with c's options plus opts, and returns the recorder.
func serveCase(t *testing.T, c refusalCase, opts ...Option) (*httptest.ResponseRecorder, *Middleware) {
	t.Helper()
	l, copts := c.build(t)
	m := mustMiddleware(t, l, append(copts, opts...)...)
	h := m.Handler(okHandler)
	for range c.warm {
		do(h, "192.0.2.1:1", nil)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	if c.mod != nil {
		r = c.mod(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w, m
}

// TestRefusalHandlerSeesEveryKind: each kind of refusal reaches the
// handler with its kind, default status, Decision, error and cost, after
// its headers are set, and the handler's answer is the response.
func TestRefusalHandlerSeesEveryKind(t *testing.T) {
	for _, c := range refusalCases() {
		t.Run(c.name, func(t *testing.T) {
			var got []Refusal
			w, _ := serveCase(t, c, WithRefusalHandler(func(w http.ResponseWriter, _ *http.Request, ref Refusal) {
				got = append(got, ref)
				if c.check != nil {
					c.check(t, ref, w.Header())
				}
				w.WriteHeader(http.StatusTeapot)
				_, _ = w.Write([]byte(ref.Kind.String()))
			}))
			if len(got) != 1 || got[0].Kind != c.kind || got[0].Status != c.status {
				t.Fatalf("handler got %+v, want one %v with status %d", got, c.kind, c.status)
			}
			if w.Code != http.StatusTeapot || w.Body.String() != c.kind.String() {
				t.Errorf("response %d %q, want the handler's", w.Code, w.Body.String())
			}
		})
	}
}

// TestWriteRefusalIsTheDefault: a handler that passes every refusal to
// WriteRefusal answers exactly as the middleware without a handler does,
// status, headers and body.
func TestWriteRefusalIsTheDefault(t *testing.T) {
	for _, c := range refusalCases() {
		t.Run(c.name, func(t *testing.T) {
			want, _ := serveCase(t, c)
			got, _ := serveCase(t, c, WithRefusalHandler(WriteRefusal))
			if got.Code != c.status || want.Code != c.status {
				t.Fatalf("status %d (default %d), want %d", got.Code, want.Code, c.status)
			}
			if got.Body.String() != want.Body.String() || !headersEqual(got.Header(), want.Header()) {
				t.Errorf("WriteRefusal:\n%v %q\nthe default:\n%v %q", got.Header(), got.Body.String(), want.Header(), want.Body.String())
			}
		})
	}
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\n") != strings.Join(b[k], "\n") {
			return false
		}
	}
	return true
}

// TestRefusalHandlerThatWritesNothing: a handler (of any of the three
// options) that only adds a header leaves the default answer, with its
// header, where net/http would have sent 200 OK.
func TestRefusalHandlerThatWritesNothing(t *testing.T) {
	addHeader := func(w http.ResponseWriter) { w.Header().Set("X-Seen", "1") }
	cases := refusalCases()
	for _, c := range []struct {
		name string
		c    refusalCase
		opt  Option
	}{
		{"WithRefusalHandler, 429", cases[0], WithRefusalHandler(func(w http.ResponseWriter, _ *http.Request, _ Refusal) { addHeader(w) })},
		{"WithRefusalHandler, 503", cases[1], WithRefusalHandler(func(w http.ResponseWriter, _ *http.Request, _ Refusal) { addHeader(w) })},
		{"WithDenyHandler", cases[0], WithDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { addHeader(w) }))},
		{"WithKeyErrorHandler", cases[5], WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, _ error) { addHeader(w) })},
	} {
		want, _ := serveCase(t, c.c)
		got, _ := serveCase(t, c.c, c.opt)
		if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("X-Seen") != "1" {
			t.Errorf("%s: %d %q (X-Seen %q), want the default %d %q with X-Seen", c.name, got.Code, got.Body.String(), got.Header().Get("X-Seen"), want.Code, want.Body.String())
		}
	}
}

// TestRefusalHandlerEarlyHints: a 1xx before nothing else does not begin
// the response: the client still gets the refusal's status.
func TestRefusalHandlerEarlyHints(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	m := mustMiddleware(t, e, WithRefusalHandler(func(w http.ResponseWriter, _ *http.Request, _ Refusal) {
		w.Header().Set("Link", "</help>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
	}))
	srv := httptest.NewServer(m.Handler(okHandler))
	defer srv.Close()
	var hints int
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error { hints++; return nil },
	})
	var codes []int
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 429 || hints != 1 {
		t.Errorf("statuses %v, 1xx seen %d; want [200 429] and 1", codes, hints)
	}
}

// TestRefusalHandlerPanics: a panicking handler's panic goes up, as any
// handler's, with the refusal already counted.
func TestRefusalHandlerPanics(t *testing.T) {
	c := refusalCases()[0]
	defer func() {
		if recover() == nil {
			t.Error("the panic did not propagate")
		}
	}()
	var m *Middleware
	defer func() {
		if s := m.Stats(); s.Denied != 1 || s.Allowed != 1 {
			t.Errorf("stats %+v, want the 429 counted Denied", s)
		}
	}()
	l, opts := c.build(t)
	m = mustMiddleware(t, l, append(opts, WithRefusalHandler(func(http.ResponseWriter, *http.Request, Refusal) { panic("handler bug") }))...)
	h := m.Handler(okHandler)
	do(h, "192.0.2.1:1", nil)
	do(h, "192.0.2.1:1", nil)
}

// TestNarrowerHandlersWin: WithDenyHandler answers 429s and
// WithKeyErrorHandler 400s before WithRefusalHandler, which answers the
// rest.
func TestNarrowerHandlersWin(t *testing.T) {
	var who []string
	opts := []Option{
		WithRefusalHandler(func(w http.ResponseWriter, _ *http.Request, ref Refusal) {
			who = append(who, "refusal:"+ref.Kind.String())
			w.WriteHeader(ref.Status)
		}),
		WithDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := DecisionFrom(r.Context()); !ok {
				t.Error("DecisionFrom in the deny handler: none")
			}
			who = append(who, "deny")
			w.WriteHeader(429)
		})),
		WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, _ error) {
			who = append(who, "keyerror")
			w.WriteHeader(401)
		}),
	}
	cases := refusalCases()
	for _, i := range []int{0, 1, 4, 5, 7} { // limited, keys full, too costly, bad key, negative cost
		serveCase(t, cases[i], opts...)
	}
	want := "deny refusal:keys-full refusal:too-costly keyerror refusal:misconfigured"
	if got := strings.Join(who, " "); got != want {
		t.Errorf("handlers ran: %s\nwant:        %s", got, want)
	}
}

// TestRefusalHandlerUnderDryRunAndMulti: under WithDryRun only a request
// whose caller is gone is refused; under NewMulti the refusing policy's
// Decision reaches the handler, and a failed backend is ErrPolicyFailed.
func TestRefusalHandlerUnderDryRunAndMulti(t *testing.T) {
	var got []Refusal
	record := WithRefusalHandler(func(w http.ResponseWriter, _ *http.Request, ref Refusal) {
		got = append(got, ref)
		w.WriteHeader(ref.Status)
	})
	for _, c := range refusalCases() {
		serveCase(t, c, record, WithDryRun())
	}
	if len(got) != 1 || got[0].Kind != RefusalCallerGone {
		t.Errorf("under WithDryRun the handler got %+v, want only the caller-gone refusal", got)
	}

	got = nil
	ip, _ := newEngine(t, engine.Config{Limit: 5})
	tenant, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	m, err := NewMulti([]Policy{{Name: "ip", Limiter: ip}, {Name: "tenant", Limiter: tenant, Key: KeyFunc(func(*http.Request) (string, error) { return "t", nil })}}, record)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(okHandler)
	do(h, "192.0.2.1:1", nil)
	if w := do(h, "192.0.2.1:1", nil); w.Code != 429 || len(got) != 1 || got[0].Kind != RefusalLimited || got[0].Decision.Limit != 1 {
		t.Errorf("NewMulti, the tenant's 429: %d, handler got %+v", w.Code, got)
	}

	got = nil
	down := newRemote(func(string, int64) (engine.Decision, error) { return engine.Decision{Limit: 5}, errBackend })
	m, err = NewMulti([]Policy{{Name: "ip", Limiter: ip}, {Name: "shared", Limiter: down, Window: 10 * time.Second}}, record)
	if err != nil {
		t.Fatal(err)
	}
	if w := do(m.Handler(okHandler), "192.0.2.2:1", nil); w.Code != 503 || len(got) != 1 || got[0].Kind != RefusalUnavailable || !errors.Is(got[0].Err, ErrPolicyFailed) {
		t.Errorf("NewMulti, a failed backend: %d, handler got %+v", w.Code, got)
	}
}

// TestRefusalKindString names every kind, and an unknown one by number.
func TestRefusalKindString(t *testing.T) {
	var names []string
	for k := RefusalLimited; k <= RefusalMisconfigured+1; k++ {
		names = append(names, k.String())
	}
	if got, want := strings.Join(names, " "), "limited keys-full unavailable caller-gone too-costly bad-key misconfigured RefusalKind(8)"; got != want {
		t.Errorf("%s\nwant %s", got, want)
	}
	e, _ := newEngine(t, engine.Config{})
	if _, err := NewMiddleware(e, WithRefusalHandler(nil)); err == nil || !strings.Contains(err.Error(), "WithRefusalHandler(nil)") {
		t.Errorf("WithRefusalHandler(nil): %v", err)
	}
}

// TestRefusalHandlerHijacks: a handler that takes the connection answers
// on it, and the middleware writes nothing after it.
func TestRefusalHandlerHijacks(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	m := mustMiddleware(t, e, WithRefusalHandler(func(w http.ResponseWriter, _ *http.Request, _ Refusal) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 429 Too Many Requests\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy")
		_ = buf.Flush()
	}))
	var logged syncBuffer
	srv := httptest.NewUnstartedServer(m.Handler(okHandler))
	srv.Config.ErrorLog = log.New(&logged, "", 0) // a write after the hijack would be logged here
	srv.Start()
	var got []string
	for range 2 {
		resp, body := get(t, srv.Client(), srv.URL, nil)
		got = append(got, resp.Status+" "+body)
	}
	srv.Close()
	if got[0] != "200 OK ok" || got[1] != "429 Too Many Requests busy" {
		t.Errorf("%q", got)
	}
	if s := logged.String(); s != "" {
		t.Errorf("the server logged: %s", s)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
