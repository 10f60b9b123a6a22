package grpclimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/adapter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestUnaryLoopback: Limit 2 per 10 s (10 sub-windows) at an instant
// aligned to the window, over a real TCP connection. Two calls are
// admitted with the fields; the third is ResourceExhausted with the exact
// RetryInfo delay: the two units leave the weighted estimate enough for
// one more at t0 + 10.5 s (the oldest sub-window at half weight).
func TestUnaryLoopback(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Limit: 2, Window: 10 * time.Second})
	i := mustInterceptorT(t, e, WithPolicy("per-ip", 0))
	cc, es := serve(t, grpc.UnaryInterceptor(i.Unary()))

	for n, want := range []string{`"per-ip";r=1;t=11`, `"per-ip";r=0;t=11`} {
		r := say(t, cc, nil, mSay)
		if r.code != codes.OK {
			t.Fatalf("call %d: %v %s", n, r.code, r.msg)
		}
		wantMD(t, r.header, MDPolicy, `"per-ip";q=2;w=10`)
		wantMD(t, r.header, MDRateLimit, want)
	}
	r := say(t, cc, nil, mSay)
	if r.code != codes.ResourceExhausted {
		t.Fatalf("third call: %v %s, want ResourceExhausted", r.code, r.msg)
	}
	if r.retry != 10500*time.Millisecond {
		t.Errorf("RetryInfo delay %v, want exactly 10.5s", r.retry)
	}
	if r.msg != "grpclimit: rate limited; retry after 10.5s" {
		t.Errorf("message %q", r.msg)
	}
	wantMD(t, r.header, MDPolicy, `"per-ip";q=2;w=10`)
	wantMD(t, r.header, MDRateLimit, `"per-ip";r=0;t=11`)
	if es.count() != 2 {
		t.Errorf("the handler ran %d times, want 2", es.count())
	}
	// 1 ns early it still does not fit; at the delay it does.
	clk.Advance(10500*time.Millisecond - 1)
	if r := say(t, cc, nil, mSay); r.code != codes.ResourceExhausted || r.retry != 1 {
		t.Errorf("1 ns before the delay: %v retry %v, want ResourceExhausted retry 1ns", r.code, r.retry)
	}
	clk.Advance(1)
	if r := say(t, cc, nil, mSay); r.code != codes.OK {
		t.Errorf("at the delay: %v %s", r.code, r.msg)
	}
	if s := i.Stats(); s != (Stats{Allowed: 3, Denied: 2}) {
		t.Errorf("Stats %+v", s)
	}
}

// TestFieldsMatchHTTPLimit: for every algorithm, the same sequence of
// requests through httplimit (over HTTP) and of calls through grpclimit
// (over gRPC), each on its own engine at the same instants, gives the same
// RateLimit-Policy and RateLimit values, and the RetryInfo delay rounds up
// to httplimit's Retry-After.
func TestFieldsMatchHTTPLimit(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			start := t0.Add(2300 * time.Millisecond) // inside a sub-window and a fixed window
			cfg := engine.Config{Limit: 3, Window: 3 * time.Second, Algorithm: alg}
			he, hclk := newEngine(t, cfg)
			ge, gclk := newEngine(t, cfg)
			hclk.Set(start)
			gclk.Set(start)
			m, err := httplimit.NewMiddleware(he, httplimit.WithPolicy("p", 0))
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			defer hs.Close()
			cc, _ := serve(t, grpc.UnaryInterceptor(mustInterceptorT(t, ge, WithPolicy("p", 0)).Unary()))
			for step, adv := range []time.Duration{0, 0, 0, 0, 700 * time.Millisecond, 0, 2 * time.Second, 0, 0, 0, 3100 * time.Millisecond} {
				hclk.Advance(adv)
				gclk.Advance(adv)
				resp, err := hs.Client().Get(hs.URL)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				r := say(t, cc, nil, mSay)
				if (resp.StatusCode == 200) != (r.code == codes.OK) {
					t.Fatalf("step %d: HTTP %d, gRPC %v", step, resp.StatusCode, r.code)
				}
				wantMD(t, r.header, MDPolicy, resp.Header.Values("RateLimit-Policy")...)
				wantMD(t, r.header, MDRateLimit, resp.Header.Values("RateLimit")...)
				if resp.StatusCode == 429 {
					if got := strconv.FormatInt(adapter.RetrySeconds(r.retry), 10); got != resp.Header.Get("Retry-After") {
						t.Errorf("step %d: RetryInfo %v rounds to %s, Retry-After %s", step, r.retry, got, resp.Header.Get("Retry-After"))
					}
				}
			}
		})
	}
}

// TestStreamPerStream: a stream is charged once at its start, however
// many messages it carries; the third stream is refused before the
// handler runs, with the fields in its header and RetryInfo.
func TestStreamPerStream(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: engine.FixedWindow})
	i := mustInterceptorT(t, e)
	cc, es := serve(t, grpc.StreamInterceptor(i.Stream()))
	for s := range 2 {
		st, err := cc.NewStream(context.Background(), chatDesc, mChat)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if err := st.SendMsg(wrapperspb.String("m")); err != nil {
				t.Fatal(err)
			}
			if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				t.Fatalf("stream %d: %v", s, err)
			}
		}
		hdr, _ := st.Header()
		wantMD(t, hdr, MDRateLimit, `"default";r=`+strconv.Itoa(1-s)+`;t=10`)
		_ = st.CloseSend()
		if err := st.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
			t.Fatalf("stream %d end: %v", s, err)
		}
	}
	st, err := cc.NewStream(context.Background(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	err = st.RecvMsg(new(wrapperspb.StringValue))
	hdr, _ := st.Header()
	r := resultOf(err, hdr)
	if r.code != codes.ResourceExhausted || r.retry != 10*time.Second {
		t.Fatalf("third stream: %v retry %v, want ResourceExhausted retry 10s", r.code, r.retry)
	}
	wantMD(t, hdr, MDRateLimit, `"default";r=0;t=10`)
	if es.count() != 10 {
		t.Errorf("%d messages echoed, want 10", es.count())
	}
	if s := i.Stats(); s != (Stats{Allowed: 2, Denied: 1}) {
		t.Errorf("Stats %+v", s)
	}
}

// TestStreamPerMessage: with WithPerMessage each message is charged; on
// a stream the fourth message (Limit 3) ends it with ResourceExhausted,
// RetryInfo and the fields in the trailer; the stream's start is free.
func TestStreamPerMessage(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 3, Algorithm: engine.FixedWindow})
	i := mustInterceptorT(t, e, WithPerMessage())
	cc, es := serve(t, grpc.StreamInterceptor(i.Stream()))
	st, err := cc.NewStream(context.Background(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for n := range 4 {
		if err := st.SendMsg(wrapperspb.String("m")); err != nil {
			t.Fatal(err)
		}
		last = st.RecvMsg(new(wrapperspb.StringValue))
		if n < 3 && last != nil {
			t.Fatalf("message %d: %v", n, last)
		}
	}
	r := resultOf(last, nil)
	if r.code != codes.ResourceExhausted || r.retry != 10*time.Second {
		t.Fatalf("fourth message: %v retry %v, want ResourceExhausted retry 10s", r.code, r.retry)
	}
	wantMD(t, st.Trailer(), MDRateLimit, `"default";r=0;t=10`)
	wantMD(t, st.Trailer(), MDPolicy, `"default";q=3;w=10`)
	if es.count() != 3 {
		t.Errorf("%d messages echoed, want 3", es.count())
	}
	if s := i.Stats(); s != (Stats{Allowed: 3, Denied: 1}) {
		t.Errorf("Stats %+v", s)
	}
	// Unary calls are still charged once each.
	if r := say(t, serveUnary(t, i), nil, mSay); r.code != codes.ResourceExhausted {
		t.Errorf("a unary call on the spent key: %v", r.code)
	}
}

func serveUnary(t *testing.T, i *Interceptor) *grpc.ClientConn {
	cc, _ := serve(t, grpc.UnaryInterceptor(i.Unary()))
	return cc
}

// TestExempt: health checks and reflection pass by default, uncounted;
// WithoutDefaultExempt limits them; WithExempt adds a function, and
// several add up.
func TestExempt(t *testing.T) {
	check := func(cc *grpc.ClientConn) codes.Code {
		_, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
		return resultOf(err, nil).code
	}
	e, _ := newEngine(t, engine.Config{Limit: 1})
	i := mustInterceptorT(t, e)
	cc := serveUnary(t, i)
	for range 3 {
		if c := check(cc); c != codes.OK {
			t.Fatalf("health check: %v", c)
		}
	}
	if s := i.Stats(); s != (Stats{}) {
		t.Errorf("exempt calls counted: %+v", s)
	}
	for _, m := range []string{
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
		"/grpc.health.v1.Health/Watch",
	} {
		if !i.exempt(context.Background(), m) {
			t.Errorf("%s is not exempt", m)
		}
	}

	e2, _ := newEngine(t, engine.Config{Limit: 1})
	cc = serveUnary(t, mustInterceptorT(t, e2, WithoutDefaultExempt()))
	if c1, c2 := check(cc), check(cc); c1 != codes.OK || c2 != codes.ResourceExhausted {
		t.Errorf("WithoutDefaultExempt: %v then %v, want OK then ResourceExhausted", c1, c2)
	}

	e3, _ := newEngine(t, engine.Config{Limit: 1})
	i3 := mustInterceptorT(t, e3,
		WithExempt(func(_ context.Context, m string) bool { return m == mBig }),
		WithExempt(func(_ context.Context, m string) bool { return strings.HasPrefix(m, "/other.Svc/") }))
	cc = serveUnary(t, i3)
	for range 3 {
		if r := say(t, cc, nil, mBig); r.code != codes.OK || len(r.header) > 0 && r.header.Get(MDRateLimit) != nil {
			t.Fatalf("exempt method: %v %v", r.code, r.header)
		}
	}
	bg := context.Background()
	if !i3.exempt(bg, "/other.Svc/Any") || i3.exempt(bg, "/other.Svc2/Any") || i3.exempt(bg, mSay) {
		t.Error("service exemption matches the wrong methods")
	}
}

// TestMethodCost: per-method costs, a free method, and a cost above a
// per-key limit answered FailedPrecondition with the fields.
func TestMethodCost(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow})
	i := mustInterceptorT(t, e, WithMethodCost(mBig, 3), WithMethodCost(mSay, 0))
	cc := serveUnary(t, i)
	for n, want := range []string{"r=2", "r=2"} {
		if r := say(t, cc, nil, mBig); n == 0 && (r.code != codes.OK || !strings.Contains(r.header.Get(MDRateLimit)[0], want)) {
			t.Fatalf("Big: %v %v", r.code, r.header)
		} else if n == 1 && r.code != codes.ResourceExhausted {
			t.Fatalf("second Big: %v, want ResourceExhausted", r.code)
		}
	}
	for range 3 {
		if r := say(t, cc, nil, mSay); r.code != codes.OK || r.header.Get(MDRateLimit)[0] != `"default";r=2;t=10` {
			t.Fatalf("free Say: %v %v", r.code, r.header)
		}
	}

	// Per-key limits: a tenant whose limit is below the cost.
	ek, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow, KeyLimit: func(string) int64 { return 2 }})
	ik := mustInterceptorT(t, ek, WithMethodCost(mBig, 3))
	r := say(t, serveUnary(t, ik), nil, mBig)
	if r.code != codes.FailedPrecondition || r.msg != "grpclimit: call cost 3 exceeds the limit 2 per window" || r.retry != -1 {
		t.Errorf("cost above the key's limit: %v %q retry %v", r.code, r.msg, r.retry)
	}
	wantMD(t, r.header, MDRateLimit, `"default";r=2`)
	if s := ik.Stats(); s != (Stats{Rejected: 1}) {
		t.Errorf("Stats %+v", s)
	}

	// WithCost: a negative result is a bug, Internal.
	ic := mustInterceptorT(t, e, WithCost(func(_ context.Context, m string) int64 { return -1 }))
	if r := say(t, serveUnary(t, ic), nil, mSay); r.code != codes.Internal {
		t.Errorf("negative cost: %v", r.code)
	}
}

// TestContextLimiter: a ContextLimiter's decisions are served like the
// engine's; the call's context reaches it; an error follows the Decision
// returned with it, counted as Errors, without fields.
func TestContextLimiter(t *testing.T) {
	var d engine.Decision
	var err error
	f := &fakeRemote{next: func(string, int64) (engine.Decision, error) { return d, err }}
	i := mustInterceptorT(t, f, WithPolicy("shared", 10*time.Second))
	cc := serveUnary(t, i)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "trace", "abc")

	d, err = engine.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
	r := say(t, cc, ctx, mSay)
	if r.code != codes.OK {
		t.Fatal(r.code)
	}
	wantMD(t, r.header, MDPolicy, `"shared";q=10;w=10`)
	wantMD(t, r.header, MDRateLimit, `"shared";r=9`) // no Config: no t= on admission

	d, err = engine.Decision{Allowed: true, Limit: 10, Remaining: 10}, errBackend // fail-open
	if r := say(t, cc, ctx, mSay); r.code != codes.OK || r.header.Get(MDRateLimit) != nil {
		t.Errorf("fail-open: %v %v", r.code, r.header)
	}
	d, err = engine.Decision{Limit: 10, RetryAfter: 250 * time.Millisecond}, errBackend // fail-closed
	r = say(t, cc, ctx, mSay)
	if r.code != codes.Unavailable || r.retry != 250*time.Millisecond || r.header.Get(MDRateLimit) != nil {
		t.Errorf("fail-closed: %v retry %v %v", r.code, r.retry, r.header)
	}
	d, err = engine.Decision{Limit: 10, RetryAfter: engine.Never}, errBackend
	if r := say(t, cc, ctx, mSay); r.code != codes.Unavailable || r.retry != -1 {
		t.Errorf("fail-closed without a wait: %v retry %v", r.code, r.retry)
	}
	// A limited answer from a working backend is a normal denial.
	d, err = engine.Decision{Limit: 10, Remaining: 0, RetryAfter: 1500 * time.Millisecond}, nil
	if r := say(t, cc, ctx, mSay); r.code != codes.ResourceExhausted || r.retry != 1500*time.Millisecond {
		t.Errorf("limited: %v retry %v", r.code, r.retry)
	}
	if s := i.Stats(); s != (Stats{Allowed: 1, Denied: 1, Errors: 3}) {
		t.Errorf("Stats %+v", s)
	}
	for n, tr := range f.trace {
		if tr != "abc" {
			t.Errorf("call %d: the limiter saw trace %q, want the call's metadata", n, tr)
		}
	}
}

// TestCancelledCall: a client that gives up while a slow backend decides
// cancels the context the backend sees; the failed decision runs no
// handler and is counted Canceled.
func TestCancelledCall(t *testing.T) {
	entered := make(chan struct{})
	seen := make(chan error, 1)
	block := ContextLimiterFunc(func(ctx context.Context, key string, n int64) (engine.Decision, error) {
		close(entered)
		<-ctx.Done()
		seen <- ctx.Err()
		return engine.Decision{Limit: 1, RetryAfter: time.Second}, ctx.Err()
	})
	i := mustInterceptorT(t, block)
	served := make(chan struct{}) // closed when the interceptor has returned
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		defer close(served)
		return h(ctx, req)
	}
	cc, _ := serve(t, grpc.ChainUnaryInterceptor(outer, i.Unary()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- say(t, cc, ctx, mSay) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the limiter was never called")
	}
	cancel()
	select {
	case r := <-done:
		if r.code != codes.Canceled {
			t.Errorf("client saw %v, want Canceled", r.code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end")
	}
	select {
	case err := <-seen:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the limiter's context ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the limiter's context was not cancelled")
	}
	select { // the server finishes the call after the client left
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not finish the call")
	}
	if s := i.Stats(); s != (Stats{Canceled: 1}) {
		t.Errorf("Stats %+v", s)
	}
}

// ContextLimiterFunc adapts a function to ContextLimiter, for tests.
type ContextLimiterFunc func(ctx context.Context, key string, n int64) (engine.Decision, error)

func (f ContextLimiterFunc) AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) {
	return f(ctx, key, n)
}

// TestMaxKeys: a new key refused by MaxKeys is Unavailable with the
// engine's hint and no fields, counted Denied.
func TestMaxKeys(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 5, MaxKeys: 1})
	e.AllowN("someone else", 1)
	i := mustInterceptorT(t, e)
	r := say(t, serveUnary(t, i), nil, mSay)
	if r.code != codes.Unavailable || r.retry <= 0 || r.header.Get(MDRateLimit) != nil {
		t.Errorf("%v retry %v %v", r.code, r.retry, r.header)
	}
	if s := i.Stats(); s != (Stats{Denied: 1}) {
		t.Errorf("Stats %+v", s)
	}
}

// TestHeadersOptions: WithHeaders(0) sends none, RetryInfo stays;
// WithHeadersBelow sends them on admitted calls only near the limit.
func TestHeadersOptions(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	cc := serveUnary(t, mustInterceptorT(t, e, WithHeaders(0)))
	say(t, cc, nil, mSay)
	if r := say(t, cc, nil, mSay); r.code != codes.ResourceExhausted || r.retry != 10*time.Second || len(r.header.Get(MDRateLimit)) != 0 {
		t.Errorf("WithHeaders(0): %v %v %v", r.code, r.retry, r.header)
	}
	e2, _ := newEngine(t, engine.Config{Limit: 10, Algorithm: engine.FixedWindow})
	cc = serveUnary(t, mustInterceptorT(t, e2, WithHeadersBelow(0.5)))
	for n := range 10 {
		r := say(t, cc, nil, mSay)
		has := len(r.header.Get(MDRateLimit)) > 0
		if want := 9-n < 5; has != want { // remaining after call n is 9−n
			t.Errorf("call %d (remaining %d): fields %v, want %v", n, 9-n, has, want)
		}
	}
	if r := say(t, cc, nil, mSay); r.code != codes.ResourceExhausted || len(r.header.Get(MDRateLimit)) != 1 {
		t.Errorf("denial under WithHeadersBelow: %v %v", r.code, r.header)
	}
}

// TestStacked: two interceptors in a chain each add their own value to
// each field, as stacked httplimit middlewares add list members.
func TestStacked(t *testing.T) {
	outer, _ := newEngine(t, engine.Config{Limit: 100, Window: 60 * time.Second, Algorithm: engine.FixedWindow})
	inner, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow})
	cc, _ := serve(t, grpc.ChainUnaryInterceptor(
		mustInterceptorT(t, outer, WithPolicy("wide", 0)).Unary(),
		mustInterceptorT(t, inner, WithPolicy("per-ip", 0)).Unary()))
	r := say(t, cc, nil, mSay)
	wantMD(t, r.header, MDPolicy, `"wide";q=100;w=60`, `"per-ip";q=5;w=10`)
	wantMD(t, r.header, MDRateLimit, `"wide";r=99;t=40`, `"per-ip";r=4;t=10`)
}

// TestConcurrentCallsExact: with the clock still, 64 concurrent calls
// from one peer over a real connection admit exactly Limit, and the
// counters add up.
func TestConcurrentCallsExact(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 20})
	i := mustInterceptorT(t, e)
	cc, es := serve(t, grpc.UnaryInterceptor(i.Unary()))
	results := make(chan codes.Code, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() { results <- say(t, cc, nil, mSay).code })
	}
	wg.Wait()
	close(results)
	var ok, limited int
	for c := range results {
		switch c {
		case codes.OK:
			ok++
		case codes.ResourceExhausted:
			limited++
		default:
			t.Errorf("code %v", c)
		}
	}
	if ok != 20 || limited != 44 || es.count() != 20 {
		t.Errorf("admitted %d, limited %d, handled %d; want 20, 44, 20", ok, limited, es.count())
	}
	if s := i.Stats(); s != (Stats{Allowed: 20, Denied: 44}) {
		t.Errorf("Stats %+v", s)
	}
}

// TestCountersPadded pins the Client counters' layout: each on its own
// cache line, the last followed by a full line.
func TestCountersPadded(t *testing.T) {
	// The Interceptor's counters are internal/adapter's Counters, pinned
	// by that package's TestCountersPadded.
	const cacheLine = adapter.CacheLine
	var c Client
	coffs := []uintptr{unsafe.Offsetof(c.admitted), unsafe.Offsetof(c.delayed), unsafe.Offsetof(c.refused), unsafe.Offsetof(c.canceled), unsafe.Offsetof(c.errs), unsafe.Offsetof(c.waited)}
	for n := 1; n < len(coffs); n++ {
		if coffs[n]-coffs[n-1] != cacheLine {
			t.Errorf("Client counters %d and %d are %d bytes apart", n-1, n, coffs[n]-coffs[n-1])
		}
	}
	if tail := unsafe.Sizeof(c) - coffs[len(coffs)-1]; tail != cacheLine {
		t.Errorf("Client's last counter has %d bytes to the end, want %d", tail, cacheLine)
	}
}
