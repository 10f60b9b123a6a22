package grpclimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ReservingLimiter is the shape of a shared limiter that can hold a
// call's units across its handler, for WithInFlight and WithSettle: a
// ContextLimiter whose ReserveN decides as AllowN and, when it admits,
// returns a SettleFunc that settles those units once. It is
// httplimit.ReservingLimiter's method set. *engine.Engine holds units
// in-process and needs no such method.
type ReservingLimiter interface {
	ContextLimiter
	ReserveN(ctx context.Context, key string, n int64) (engine.Decision, SettleFunc, error)
}

// SettleFunc settles units a ReservingLimiter reserved, to actual ≥ 0
// (0 gives them all back; after an admission of n = 0, actual units are
// charged); the interceptor calls it at most once, after
// the handler, on a context without the call's cancellation. An error
// leaves the units as reserved and is counted in Stats.SettleErrors. It is
// httplimit.SettleFunc.
type SettleFunc = func(ctx context.Context, actual int64) (engine.Decision, error)

// ErrNoSettle is ReportCost's error when no interceptor with WithSettle
// runs around the handler. It is httplimit.ErrNoSettle too.
var ErrNoSettle = adapter.ErrNoSettle

// ReportCost reports the actual cost of the call whose context is ctx
// (the handler's ctx, or a stream's Context()) to the interceptors with
// WithSettle around the handler, which settle their reservation to it
// when the handler returns. The last report before then wins. A negative
// n is an error and changes nothing; so is a ctx with no settling
// interceptor (ErrNoSettle). It is safe to call from any goroutine; a
// report allocates nothing. It has the meaning of httplimit.ReportCost.
func ReportCost(ctx context.Context, n int64) error {
	return adapter.Report(ctx, n, "grpclimit: ", errNoSettle)
}

// errNoSettle is ReportCost's ErrNoSettle, built once.
var errNoSettle = adapter.NoSettle("grpclimit: ")

// WithSettle makes a call's cost an estimate, settled after the handler to
// the cost it reports with ReportCost: the interceptor reserves the
// estimate (WithCost's, WithMethodCost's, or 1) before the handler, and
// when the handler returns (a stream's, when the stream ends) settles the
// reservation to the last cost reported: fewer units go back, more are
// charged past the limit, a debt later calls wait out. A handler that
// reports nothing keeps the estimate; one that panics is settled to what
// it reported before, else keeps the estimate. An estimate of 0 reserves
// 1 unit, settled like any other (nothing reported: given back), so that
// a call in debt is refused whatever its estimate. A call whose client left
// mid-handler is still settled. A settle the limiter refuses leaves the
// estimate charged and is counted in Stats.SettleErrors.
//
// The ratelimit fields go out in the header metadata before the handler
// runs, so they carry the reservation's values (t= bounds the units
// reserved, not a debt charged after the handler); the settle's effect
// shows in the next call's. It has the meaning of httplimit.WithSettle
// (docs/grpc.md). It needs a limiter that can hold units (an
// *engine.Engine or a ReservingLimiter), and cannot be combined with
// WithInFlight or WithPerMessage; Limit refuses calls with it.
func WithSettle() Option {
	return func(c *config) error { c.settle = true; return nil }
}

// WithInFlight makes the limit count calls in flight: the interceptor
// reserves a call's cost before the handler and gives it back when the
// handler returns, normally or by a panic; a stream holds its units until
// the stream ends. The limiter's Window is then a lease: units never given
// back (a handler that never returns, a process that died holding units of
// a shared limiter) stop counting when they leave the window, so choose a
// Window longer than the longest call or stream. It has the meaning of
// httplimit.WithInFlight (FixedWindow and TokenBucket are refused;
// docs/http.md says how each algorithm counts a lease). It needs a limiter that can hold units, and
// cannot be combined with WithSettle or WithPerMessage; Limit refuses calls
// with it. With NewMultiInterceptor it puts every policy in flight;
// Policy.InFlight puts one.
func WithInFlight() Option {
	return func(c *config) error { c.inFlight = true; return nil }
}

var (
	errInFlightSettle = errors.New("grpclimit: WithInFlight and WithSettle cannot be combined: WithInFlight gives every unit back, leaving nothing to settle (with NewMultiInterceptor, put some policies in flight with Policy.InFlight and settle the others)")
	errPerMessageHeld = errors.New("grpclimit: WithPerMessage cannot be combined with WithInFlight, Policy.InFlight or WithSettle: a message is not in flight, and has no handler of its own to report its cost")
	errLimitHeld      = status.Error(codes.Internal, "grpclimit: Interceptor.Limit cannot hold units across a handler it does not run (WithInFlight, WithSettle); install the Interceptor's Unary and Stream instead")
)

// checkHeld refuses the combinations WithInFlight and WithSettle cannot
// make.
func (c *config) checkHeld() []error {
	var errs []error
	if c.inFlight && c.settle {
		errs = append(errs, errInFlightSettle)
	}
	if (c.inFlight || c.settle) && c.perMessage {
		errs = append(errs, errPerMessageHeld)
	}
	return errs
}

// checkHold checks WithInFlight and WithSettle against the limiter l of
// backend b, named where (a policy, or "").
func checkHold(where string, l any, b adapter.Backend, inFlight, settle bool) []error {
	var errs []error
	if inFlight {
		if err := adapter.CheckHold("WithInFlight", l, b); err != nil {
			errs = append(errs, fmt.Errorf("grpclimit: %s%w", where, err))
		}
	}
	if settle {
		if err := adapter.CheckHold("WithSettle", l, b); err != nil {
			errs = append(errs, fmt.Errorf("grpclimit: %s%w", where, err))
		}
	}
	return errs
}

// hold decides a call whose units are held across its handler, keeping
// them in held: it returns the fields, the call's costs (one per policy,
// in costs), how many of held it used, and nil to run the handler (a dry
// run's let-through holds nothing, a failure policy's admission what its
// ReserveN held: nothing, or redisstore's FallbackLocal's local units), or the
// refusal's status.
func (i *Interceptor) hold(ctx context.Context, method string, held *[MaxPolicies]adapter.Held, costs *[MaxPolicies]int64) (metadata.MD, int, error) {
	if i.multi != nil {
		keys, cs, err := i.prepareMulti(ctx, method)
		if err != nil {
			return nil, 0, passDryRun(err)
		}
		n := copy(costs[:], cs)
		md, err := i.decideMulti(ctx, keys, cs, held[:n])
		return md, n, err
	}
	key, cost, err := i.prepare(ctx, method)
	if err != nil {
		return nil, 0, passDryRun(err)
	}
	costs[0] = cost
	md, err := i.decide(ctx, key, cost, held[:1])
	return md, 1, err
}

// unaryHeld is Unary for an interceptor that holds a call's units across
// its handler (WithInFlight, WithSettle).
func (i *Interceptor) unaryHeld(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if i.exempt(ctx, info.FullMethod) {
		return handler(ctx, req)
	}
	var held [MaxPolicies]adapter.Held
	var costs [MaxPolicies]int64
	md, n, err := i.hold(ctx, info.FullMethod, &held, &costs)
	if md != nil {
		_ = grpc.SetHeader(ctx, md)
	}
	if err != nil {
		return nil, err
	}
	var cell *adapter.Reported
	if i.settle != 0 {
		ctx, cell = adapter.WithReported(ctx)
	}
	defer i.finish(ctx, held[:n], cell, costs[:n])
	return handler(ctx, req)
}

// streamHeld is Stream's interceptor for an interceptor that holds a
// stream's units until the stream ends.
func (i *Interceptor) streamHeld(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	var held [MaxPolicies]adapter.Held
	var costs [MaxPolicies]int64
	md, n, err := i.hold(ctx, info.FullMethod, &held, &costs)
	if md != nil {
		_ = ss.SetHeader(md)
	}
	if err != nil {
		return err
	}
	var cell *adapter.Reported
	if i.settle != 0 {
		ctx, cell = adapter.WithReported(ctx)
		ss = &heldStream{ServerStream: ss, ctx: ctx}
	}
	defer i.finish(ctx, held[:n], cell, costs[:n])
	return handler(srv, ss)
}

// heldStream is a stream whose Context carries the ReportCost cell.
type heldStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *heldStream) Context() context.Context { return s.ctx }

// finish ends what the call held (adapter.Finish) as its handler returns
// or panics.
func (i *Interceptor) finish(ctx context.Context, held []adapter.Held, cell *adapter.Reported, costs []int64) {
	if adapter.Finish(ctx, held, i.inFlight, i.settle, false, cell, costs) {
		i.counts.SettleErrors.Add(1)
	}
}
