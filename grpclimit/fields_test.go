package grpclimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/adapter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// TestFieldsMatchHTTPLimit: for every algorithm, the same sequence of
// requests through httplimit (over HTTP) and of calls through grpclimit
// (over gRPC), each on its own engine at the same instants, gives the same
// RateLimit-Policy and RateLimit values, and the RetryInfo delay rounds up
// to httplimit's Retry-After.
func TestFieldsMatchHTTPLimit(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog, engine.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			start := t0.Add(2300 * time.Millisecond) // inside a sub-window and a fixed window
			cfg := engine.Config{Limit: 3, Window: 3 * time.Second, Algorithm: alg}
			he, hclk := newEngine(t, cfg)
			ge, gclk := newEngine(t, cfg)
			hclk.Set(start)
			gclk.Set(start)
			m, err := httplimit.NewMiddleware(he, httplimit.WithPolicyName("p", 0))
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			defer hs.Close()
			cc, _ := serve(t, grpc.UnaryInterceptor(mustInterceptorT(t, ge, WithPolicyName("p", 0)).Unary()))
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

// TestStackedInterceptorsAddValues: two interceptors in a chain each add their own value to
// each field, as stacked httplimit middlewares add list members.
func TestStackedInterceptorsAddValues(t *testing.T) {
	outer, _ := newEngine(t, engine.Config{Limit: 100, Window: 60 * time.Second, Algorithm: engine.FixedWindow})
	inner, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow})
	cc, _ := serve(t, grpc.ChainUnaryInterceptor(
		mustInterceptorT(t, outer, WithPolicyName("wide", 0)).Unary(),
		mustInterceptorT(t, inner, WithPolicyName("per-ip", 0)).Unary()))
	r := say(t, cc, nil, mSay)
	wantMD(t, r.header, MDPolicy, `"wide";q=100;w=60`, `"per-ip";q=5;w=10`)
	wantMD(t, r.header, MDRateLimit, `"wide";r=99;t=40`, `"per-ip";r=4;t=10`)
}

// TestFixedWindowAdmittedResetIsExact: an admitted call of a FixedWindow
// limiter says t= the time to the end of its Unix-aligned window, as the
// denial that follows does, not the whole window (t=3600 before).
func TestFixedWindowAdmittedResetIsExact(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Algorithm: engine.FixedWindow, Window: time.Hour, Limit: 1})
	clk.Set(t0.Truncate(time.Hour).Add(time.Hour + 657*time.Second))
	i := mustInterceptorT(t, e, WithPolicyName("fixed", 0))
	s := &stubStream{}
	ctx := grpc.NewContextWithServerTransportStream(callCtx(tcp("192.0.2.1:4711")), s)
	h := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: mSay}
	if _, err := i.Unary()(ctx, nil, info, h); err != nil {
		t.Fatal(err)
	}
	wantMD(t, s.header, MDRateLimit, `"fixed";r=0;t=2943`)
	s.header = nil
	if _, err := i.Unary()(ctx, nil, info, h); err == nil {
		t.Fatal("the second call was admitted")
	}
	wantMD(t, s.header, MDRateLimit, `"fixed";r=0;t=2943`)
}

// A TokenBucket's RetryInfo is the least wait to the nanosecond: 3 per 3 s
// with a Burst of 2, after the burst, 1 s less the time since it.
func TestTokenBucketRetryInfoIsExact(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 3, Window: 3 * time.Second, Burst: 2})
	cc, _ := serve(t, grpc.UnaryInterceptor(mustInterceptorT(t, e, WithPolicyName("p", 0)).Unary()))
	for range 2 {
		if r := say(t, cc, nil, mSay); r.code != codes.OK {
			t.Fatalf("within the burst: %v", r.code)
		}
	}
	clk.Advance(123456789)
	r := say(t, cc, nil, mSay)
	if r.code != codes.ResourceExhausted || r.retry != time.Second-123456789 {
		t.Fatalf("after the burst: %v, RetryInfo %v, want %v", r.code, r.retry, time.Second-123456789)
	}
	wantMD(t, r.header, MDPolicy, `"p";q=2;w=2`)
	wantMD(t, r.header, MDRateLimit, `"p";r=0;t=1`)
}
