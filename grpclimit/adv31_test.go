package grpclimit

// The adversarial review of issue 31 (branch adv31): WithSettle, ReportCost
// and WithInFlight from their documentation only. (Package grpclimit for the
// test helpers; only exported API is exercised.)

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func advRemaining(e *engine.Engine, key string) int64 { return e.AllowN(key, 0).Remaining }

// Interceptor.Limit "does not run the handler, so it cannot give units back
// or settle them after it: with WithInFlight or WithSettle it refuses every
// call with codes.Internal". A multi-policy interceptor with one policy in
// flight (Policy.InFlight) or settled (Policy.Settle) holds units as surely
// as WithInFlight does: Limit must refuse it, and charge nothing; otherwise
// every call through go-grpc-middleware leaks an in-flight unit for a whole
// lease.
func TestAdv31LimitRefusesHeldPolicies(t *testing.T) {
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
			if got := advRemaining(held, "192.0.2.1"); got != 2 {
				t.Fatalf("the held policy keeps %d units that nothing will give back", 2-got)
			}
		})
	}
}

// WithInFlight "cannot be combined with WithSettle or WithPerMessage"; a
// policy in flight (Policy.InFlight) with WithPerMessage is that
// combination too (a settled one is refused, TestHeldConfigErrors).
func TestAdv31InFlightPolicyWithPerMessageRefused(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Algorithm: engine.SlidingWindowStrict})
	if _, err := NewMultiInterceptor([]Policy{{Name: "a", Limiter: e, InFlight: true}}, WithPerMessage()); err == nil {
		t.Fatal("a policy in flight with WithPerMessage is accepted")
	}
}

// ReportCost reports the cost "of the call whose context is ctx": a report
// through a finished call's context reaches no later call.
func TestAdv31StaleReportCostReachesNoOtherCall(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	i := mustInterceptorT(t, e, WithSettle(), WithMethodCost(mSay, 5))
	u := i.Unary()
	var stale context.Context
	if _, err := u(serverCtx(), nil, sayInfo, func(ctx context.Context, _ any) (any, error) {
		stale = ctx
		return "ok", ReportCost(ctx, 5)
	}); err != nil {
		t.Fatal(err)
	}
	for n := range 15 {
		before := advRemaining(e, "192.0.2.1")
		if _, err := u(serverCtx(), nil, sayInfo, func(ctx context.Context, _ any) (any, error) {
			_ = ReportCost(stale, 40)
			return "ok", nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := advRemaining(e, "192.0.2.1"); got != before-5 {
			t.Fatalf("call %d: remaining %d, want %d: a stale report settled it", n, got, before-5)
		}
	}
}

// advStream is a ServerStream whose context is ctx.
type advStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *advStream) Context() context.Context    { return s.ctx }
func (s *advStream) SetHeader(metadata.MD) error { return nil }

// Streams and unary calls in flight under one limit, with handlers that
// return errors, panic or exit their goroutine: never more than Limit run
// at once, and every unit is back at the end.
func TestAdv31InFlightStreamsAndCallsNeverPassTheLimit(t *testing.T) {
	const limit = 3
	e, _ := newEngine(t, engine.Config{Limit: limit, Algorithm: engine.SlidingWindowStrict})
	i := mustInterceptorT(t, e, WithInFlight())
	u, s := i.Unary(), i.Stream()
	var running, most, served atomic.Int64
	work := func(mode int) error {
		n := running.Add(1)
		for {
			o := most.Load()
			if n <= o || most.CompareAndSwap(o, n) {
				break
			}
		}
		for range 20 {
			runtime.Gosched()
		}
		running.Add(-1)
		served.Add(1)
		switch mode {
		case 1:
			panic("handler")
		case 2:
			runtime.Goexit()
		case 3:
			return status.Error(codes.Aborted, "no")
		}
		return nil
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 200 {
				mode := (g + k) % 4
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { _ = recover() }()
					if k%2 == 0 {
						_, _ = u(serverCtx(), nil, sayInfo, func(context.Context, any) (any, error) { return nil, work(mode) })
						return
					}
					ss := &advStream{ctx: serverCtx()}
					_ = s(nil, ss, &grpc.StreamServerInfo{FullMethod: mChat, IsClientStream: true, IsServerStream: true},
						func(any, grpc.ServerStream) error { return work(mode) })
				}()
				<-done
			}
		}()
	}
	wg.Wait()
	if most.Load() > limit {
		t.Fatalf("%d handlers ran at once, limit %d", most.Load(), limit)
	}
	if served.Load() == 0 {
		t.Fatal("nothing served")
	}
	if got := advRemaining(e, "192.0.2.1"); got != limit {
		t.Fatalf("after every call returned: remaining %d, want %d", got, limit)
	}
}

// BREAK (false admission): the twin of httplimit's
// TestAdv31ZeroEstimateNeverWaitsOutADebt. WithSettle: "more are charged
// past the limit, a debt later calls wait out". A call estimated at 0
// (WithMethodCost(m, 0)) is admitted as AllowN(0) is, always, so calls to
// that method never wait a debt out: five calls reporting 500 each against
// a limit of 100 are all served. The second should be ResourceExhausted.
func TestAdv31ZeroEstimateNeverWaitsOutADebt(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	i := mustInterceptorT(t, e, WithSettle(), WithMethodCost(mSay, 0))
	u := i.Unary()
	served := 0
	var errs []error
	for range 5 {
		_, err := u(serverCtx(), nil, sayInfo, func(ctx context.Context, _ any) (any, error) {
			served++
			return "ok", ReportCost(ctx, 500)
		})
		errs = append(errs, err)
	}
	if d := e.AllowN("192.0.2.1", 1); d.Allowed {
		t.Fatalf("the key is not in debt: %+v", d)
	}
	if served > 1 {
		t.Fatalf("%d calls served while the key was in debt past its limit (errors %v)", served, errs)
	}
}

type advPanicking struct{ e *engine.Engine }

func (l *advPanicking) AllowN(_ context.Context, key string, n int64) (engine.Decision, error) {
	return l.e.AllowN(key, n), nil
}

func (l *advPanicking) ReserveN(context.Context, string, int64) (engine.Decision, SettleFunc, error) {
	panic("backend bug")
}

// BREAK (in-flight leak, low): grpclimit's twin of httplimit's
// TestAdv31MultiPanicInASharedPolicy. A shared limiter that panics in
// ReserveN after an engine policy reserved its unit in flight leaves that
// unit held until the lease ends.
func TestAdv31MultiPanicInASharedPolicy(t *testing.T) {
	first, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.SlidingWindowStrict})
	other, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.SlidingWindowStrict})
	i, err := NewMultiInterceptor([]Policy{
		{Name: "first", Limiter: first, InFlight: true},
		{Name: "bad", Limiter: &advPanicking{e: other}, InFlight: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = i.Unary()(serverCtx(), nil, sayInfo, func(context.Context, any) (any, error) { return "ok", nil })
	}()
	if got := advRemaining(first, "192.0.2.1"); got != 5 {
		t.Fatalf("the engine policy keeps %d units in flight after the panic", 5-got)
	}
}

// advReserving is a ReservingLimiter over an engine that counts each
// reservation's settles.
type advReserving struct {
	e       *engine.Engine
	mu      sync.Mutex
	settles []int
	last    []int64
}

func (l *advReserving) AllowN(_ context.Context, key string, n int64) (engine.Decision, error) {
	return l.e.AllowN(key, n), nil
}

func (l *advReserving) ReserveN(_ context.Context, key string, n int64) (engine.Decision, SettleFunc, error) {
	r := l.e.Reserve(key, n)
	if !r.Decision().Allowed {
		return r.Decision(), nil, nil
	}
	l.mu.Lock()
	i := len(l.settles)
	l.settles = append(l.settles, 0)
	l.last = append(l.last, -1)
	l.mu.Unlock()
	return r.Decision(), func(_ context.Context, actual int64) (engine.Decision, error) {
		l.mu.Lock()
		l.settles[i]++
		l.last[i] = actual
		l.mu.Unlock()
		return r.Settle(actual)
	}, nil
}

// Streams under NewMultiInterceptor: a shared limiter in flight, then an
// engine in flight that refuses: the stream is refused, and the shared
// limiter's reservation is given back once ("a ReservingLimiter gives
// back what it admitted"); an admitted stream holds both until it ends,
// then gives both back, once each.
func TestAdv31MultiStreamsInFlight(t *testing.T) {
	se, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.SlidingWindowStrict})
	shared := &advReserving{e: se}
	local, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	i, err := NewMultiInterceptor([]Policy{
		{Name: "shared", Limiter: shared, InFlight: true},
		{Name: "local", Limiter: local, InFlight: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := i.Stream()
	info := &grpc.StreamServerInfo{FullMethod: mChat, IsClientStream: true, IsServerStream: true}
	var inner error
	err = s(nil, &advStream{ctx: serverCtx()}, info, func(any, grpc.ServerStream) error {
		if a, b := advRemaining(se, "192.0.2.1"), advRemaining(local, "192.0.2.1"); a != 4 || b != 0 {
			t.Errorf("while the stream runs: shared %d, local %d", a, b)
		}
		inner = s(nil, &advStream{ctx: serverCtx()}, info, func(any, grpc.ServerStream) error { return nil })
		return nil
	})
	if err != nil || status.Code(inner) != codes.ResourceExhausted {
		t.Fatalf("outer %v, inner %v", err, inner)
	}
	if a, b := advRemaining(se, "192.0.2.1"), advRemaining(local, "192.0.2.1"); a != 5 || b != 1 {
		t.Fatalf("after the streams: shared %d (want 5), local %d (want 1)", a, b)
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for k, n := range shared.settles {
		if n != 1 || shared.last[k] != 0 {
			t.Fatalf("shared reservation %d settled %d times, last to %d", k, n, shared.last[k])
		}
	}
}
