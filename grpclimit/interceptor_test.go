package grpclimit

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestUnaryLoopback: Limit 2 per 10 s (10 sub-windows) at an instant
// aligned to the window, over a real TCP connection. Two calls are
// admitted with the fields; the third is ResourceExhausted with the exact
// RetryInfo delay: the two units leave the weighted estimate enough for
// one more at t0 + 10.5 s (the oldest sub-window at half weight).
func TestUnaryLoopback(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Limit: 2, Window: 10 * time.Second})
	i := mustInterceptorT(t, e, WithPolicyName("per-ip", 0))
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
