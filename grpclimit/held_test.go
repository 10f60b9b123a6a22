package grpclimit

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// waitFor receives from ch or fails after a deadline, so that a broken
// interceptor fails the test rather than hanging it.
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

// serverCtx is the context of a call from 192.0.2.1 as a server gives it
// to the interceptor (grpc.SetHeader works on it).
func serverCtx() context.Context {
	return grpc.NewContextWithServerTransportStream(callCtx(tcp("192.0.2.1:1")), &stubStream{})
}

var sayInfo = &grpc.UnaryServerInfo{FullMethod: mSay}

// With WithInFlight a unary call holds its units while its handler runs:
// a limit of 1 refuses a second call until the first returns, and a
// handler that panics gives its unit back too.
func TestInFlightUnary(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	i := mustInterceptorT(t, e, WithInFlight())
	u := i.Unary()
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := u(serverCtx(), nil, sayInfo, func(context.Context, any) (any, error) {
			close(started)
			<-release
			return "ok", nil
		})
		first <- err
	}()
	waitFor(t, started, "the first call")
	_, err := u(serverCtx(), nil, sayInfo, func(context.Context, any) (any, error) { return "ok", nil })
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second call in flight: %v", err)
	}
	close(release)
	if err := waitFor(t, first, "the first call's end"); err != nil {
		t.Fatal(err)
	}
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 1 {
		t.Fatalf("after the call: remaining %d, want 1", got)
	}
	func() {
		defer func() {
			if recover() != "boom" {
				t.Fatal("the handler's panic was not passed on")
			}
		}()
		_, _ = u(serverCtx(), nil, sayInfo, func(context.Context, any) (any, error) { panic("boom") })
	}()
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 1 {
		t.Fatalf("after a panic: remaining %d, want 1", got)
	}
	if s := i.Stats(); s.Allowed != 2 || s.Denied != 1 || s.SettleErrors != 0 {
		t.Fatalf("Stats %+v", s)
	}
}

// A stream holds its unit until it ends, on a real server: a second
// stream is refused at its start while the first is open, and admitted
// once the first has ended; a stream whose client cancels ends too, and
// gives its unit back.
func TestInFlightStreamHoldsUntilItEnds(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	i := mustInterceptorT(t, e, WithInFlight())
	ended := make(chan struct{}, 4)
	outer := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		defer func() { ended <- struct{}{} }() // after ringlimit's interceptor has returned
		return h(srv, ss)
	}
	cc, _ := serve(t, grpc.ChainStreamInterceptor(outer, i.Stream()))
	open := func(ctx context.Context) grpc.ClientStream {
		st, err := cc.NewStream(ctx, chatDesc, mChat)
		if err != nil {
			t.Fatal(err)
		}
		// io.EOF: the server ended the stream first (a refusal can
		// come before the message is sent); RecvMsg gives its status.
		if err := st.SendMsg(wrapperspb.String("m")); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		return st
	}
	a := open(context.Background())
	if err := a.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("the first stream: %v", err)
	}
	b := open(context.Background())
	if err := b.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second stream while the first is open: %v", err)
	}
	waitFor(t, ended, "the refused stream")
	_ = a.CloseSend()
	if err := a.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
		t.Fatalf("the first stream's end: %v", err)
	}
	waitFor(t, ended, "the first stream")
	if got := e.AllowN("127.0.0.1", 0).Remaining; got != 1 {
		t.Fatalf("after the stream: remaining %d, want 1", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := open(ctx)
	if err := c.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("a new stream: %v", err)
	}
	if got := e.AllowN("127.0.0.1", 0).Remaining; got != 0 {
		t.Fatalf("with a stream open: remaining %d, want 0", got)
	}
	cancel()
	waitFor(t, ended, "the cancelled stream")
	if got := e.AllowN("127.0.0.1", 0).Remaining; got != 1 {
		t.Fatalf("after the client cancelled: remaining %d, want 1", got)
	}
}

// WithSettle settles a unary call and a stream to the cost the handler
// reports (on the stream's own context), keeps the estimate when nothing
// is reported, and counts a settle the limiter refuses.
func TestSettleUnaryAndStream(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	i := mustInterceptorT(t, e, WithMethodCost(mSay, 30), WithMethodCost(mChat, 30), WithSettle())
	u := i.Unary()
	left := func() int64 { return e.AllowN("192.0.2.1", 0).Remaining }
	report := func(n int64) func(ctx context.Context, _ any) (any, error) {
		return func(ctx context.Context, _ any) (any, error) {
			if err := ReportCost(ctx, n); err != nil && n >= 0 {
				t.Errorf("ReportCost(%d): %v", n, err)
			}
			return "ok", nil
		}
	}
	for _, c := range []struct {
		n    int64
		want int64
	}{{10, 90}, {-1, 60}, {60, 0}} {
		if _, err := u(serverCtx(), nil, sayInfo, report(c.n)); err != nil {
			t.Fatal(err)
		}
		if got := left(); got != c.want {
			t.Fatalf("report %d: remaining %d, want %d", c.n, got, c.want)
		}
	}
	if _, err := u(serverCtx(), nil, sayInfo, report(1)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the debt: %v", err)
	}

	e2, _ := newEngine(t, engine.Config{Limit: 100})
	i2 := mustInterceptorT(t, e2, WithMethodCost(mChat, 30), WithSettle())
	ss := &serverStreamStub{ctx: serverCtx()}
	err := i2.Stream()(nil, ss, &grpc.StreamServerInfo{FullMethod: mChat}, func(_ any, s grpc.ServerStream) error {
		return ReportCost(s.Context(), 4)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := e2.AllowN("192.0.2.1", 0).Remaining; got != 96 {
		t.Fatalf("stream settled: remaining %d, want 96", got)
	}

	// A settle the limiter refuses: counted, the estimate stays.
	l := &adaptertest.Reserving{E: e2, SettleErr: adaptertest.ErrBackend}
	i3 := mustInterceptorT(t, l, WithMethodCost(mSay, 30), WithSettle())
	if _, err := i3.Unary()(serverCtx(), nil, sayInfo, report(1)); err != nil {
		t.Fatal(err)
	}
	if got, s := e2.AllowN("192.0.2.1", 0).Remaining, i3.Stats(); got != 66 || s.SettleErrors != 1 {
		t.Fatalf("remaining %d (want 66), Stats %+v", got, s)
	}
	if err := ReportCost(context.Background(), 1); !errors.Is(err, ErrNoSettle) {
		t.Fatalf("ReportCost outside: %v", err)
	}
}

// serverStreamStub is a ServerStream whose context is ctx.
type serverStreamStub struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStreamStub) Context() context.Context    { return s.ctx }
func (s *serverStreamStub) SetHeader(metadata.MD) error { return nil }

// A per-IP rate beside a per-tenant limit on calls in flight, with a cost
// of its own: a call the in-flight limit refuses charges the rate nothing.
func TestInFlightMultiInterceptor(t *testing.T) {
	ipE, _ := newEngine(t, engine.Config{Limit: 100})
	tenantE, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	i, err := NewMultiInterceptor([]Policy{
		{Name: "per-ip", Limiter: ipE},
		{Name: "tenant", Limiter: tenantE, Key: KeyByMetadata("tenant", MissingReject), InFlight: true, Cost: func(context.Context, string) int64 { return 1 }},
	}, WithMethodCost(mSay, 5))
	if err != nil {
		t.Fatal(err)
	}
	u := i.Unary()
	ctx := func() context.Context {
		return grpc.NewContextWithServerTransportStream(callCtx(tcp("192.0.2.1:1"), "tenant", "acme"), &stubStream{})
	}
	var inner error
	_, err = u(ctx(), nil, sayInfo, func(context.Context, any) (any, error) {
		_, inner = u(ctx(), nil, sayInfo, func(context.Context, any) (any, error) { return "ok", nil })
		return "ok", nil
	})
	if err != nil || status.Code(inner) != codes.ResourceExhausted {
		t.Fatalf("outer %v, inner %v", err, inner)
	}
	if a, b := ipE.AllowN("192.0.2.1", 0).Remaining, tenantE.AllowN("acme", 0).Remaining; a != 95 || b != 1 {
		t.Fatalf("per-ip %d (want 95: one call of 5), tenant %d (want 1: given back)", a, b)
	}
}

// What WithInFlight and WithSettle need is checked at construction, and
// Limit, which does not run the handler, refuses to hold.
func TestHeldConfigErrors(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	fixed, _ := newEngine(t, engine.Config{Algorithm: engine.FixedWindow})
	bucket, _ := newEngine(t, engine.Config{Algorithm: engine.TokenBucket})
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
		{"per message", e, []Option{WithInFlight(), WithPerMessage()}, "WithPerMessage cannot be combined"},
		{"fixed", fixed, []Option{WithInFlight()}, "WithInFlight: the limiter's Algorithm is fixed"},
		{"token bucket", bucket, []Option{WithInFlight()}, "WithInFlight: the limiter's Algorithm is token"},
		{"plain", plain, []Option{WithSettle()}, "WithSettle needs a limiter that can give units back"},
	} {
		_, err := NewInterceptor(c.l, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	i := mustInterceptorT(t, e, WithInFlight())
	if err := i.Limit(serverCtx()); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "install the Interceptor's Unary and Stream") {
		t.Fatalf("Limit with WithInFlight: %v", err)
	}
	if _, err := NewMultiInterceptor([]Policy{{Name: "a", Limiter: e, Settle: true}}, WithPerMessage()); err == nil {
		t.Fatal("a settled policy with WithPerMessage is accepted")
	}
}

// Interceptor.Limit "does not run the handler, so it cannot give units back
// or settle them after it: with WithInFlight or WithSettle it refuses every
// call with codes.Internal". A multi-policy interceptor with one policy in
// flight (Policy.InFlight) or settled (Policy.Settle) holds units as surely
// as WithInFlight does: Limit must refuse it, and charge nothing; otherwise
// every call through go-grpc-middleware leaks an in-flight unit for a whole
// lease.
func TestLimitRefusesHeldPolicies(t *testing.T) {
	for _, c := range []struct {
		name     string
		inFlight bool
		settle   bool
	}{{"Policy.InFlight", true, false}, {"Policy.Settle", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			rate, _ := newEngine(t, engine.Config{Limit: 10})
			held, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: engine.SlidingWindowStrict})
			i, err := NewMultiInterceptor([]Policy{
				{Name: "rate", Limiter: rate},
				{Name: "held", Limiter: held, InFlight: c.inFlight, Settle: c.settle},
			})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				err := i.Limit(serverCtx())
				if status.Code(err) != codes.Internal {
					t.Fatalf("Limit with a held policy: %v, want codes.Internal", err)
				}
			}
			if got := remainingOf(held, "192.0.2.1"); got != 2 {
				t.Fatalf("the held policy keeps %d units that nothing will give back", 2-got)
			}
		})
	}
}

// WithInFlight "cannot be combined with WithSettle or WithPerMessage"; a
// policy in flight (Policy.InFlight) with WithPerMessage is that
// combination too (a settled one is refused, TestHeldConfigErrors).
func TestInFlightPolicyWithPerMessageRefused(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Algorithm: engine.SlidingWindowStrict})
	if _, err := NewMultiInterceptor([]Policy{{Name: "a", Limiter: e, InFlight: true}}, WithPerMessage()); err == nil {
		t.Fatal("a policy in flight with WithPerMessage is accepted")
	}
}
