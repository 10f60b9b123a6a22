package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
	"github.com/ringlimit/ringlimit/internal/untrusted"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Limiter is the in-process shape an Interceptor accepts:
// *engine.Engine has it. It is httplimit.Limiter's method set.
type Limiter interface {
	AllowN(key string, n int64) engine.Decision
}

// ContextLimiter is the shape of a limiter that can fail, such as
// *redisstore.Limiter; an Interceptor accepts it as directly as a Limiter.
// It is httplimit.ContextLimiter's method set. The call's context is
// passed to AllowN. A non-nil error means the backend could not decide,
// and the Decision returned with it is its failure policy's: the
// interceptor follows it, unless the call's context is done by then, when
// it runs no handler whatever the Decision (see Interceptor).
type ContextLimiter interface {
	AllowN(ctx context.Context, key string, n int64) (engine.Decision, error)
}

// Metadata keys of the rate-limit fields: gRPC metadata keys are lower
// case. Their values are httplimit's RateLimit-Policy and RateLimit.
const (
	MDPolicy    = "ratelimit-policy"
	MDRateLimit = "ratelimit"
)

// Interceptor limits gRPC calls with a Limiter or a ContextLimiter. Build
// it with NewInterceptor, install Unary and Stream on the server, and read
// its counters with Stats. It is safe for concurrent use and must not be
// copied after first use.
//
// For each call that is not exempt (DefaultExempt(), WithExempt), it
// computes the key and the cost, asks the limiter for cost units, and
// (with WithDryRun, refusing nothing: see there):
//
//   - admitted: sets the rate-limit fields as response header metadata
//     and calls the handler (counted Allowed);
//   - limited: answers codes.ResourceExhausted with a google.rpc.RetryInfo
//     detail whose retry_delay is the limiter's RetryAfter, exactly, and
//     the fields (t= is that delay in whole seconds, rounded up, at least
//     1) (counted Denied);
//   - refused because the engine holds Config.MaxKeys keys:
//     codes.Unavailable with RetryInfo (the engine's hint) and no fields,
//     as the key has no state (counted Denied);
//   - a ContextLimiter returned an error while the call's context was done
//     (the client cancelled, or its deadline passed): runs no handler,
//     whatever Decision the limiter returned, and ends the call with the
//     context's status, codes.Canceled or codes.DeadlineExceeded
//     (counted Canceled): the failure policy answers for the backend,
//     never for a caller who left;
//   - a ContextLimiter returned an error otherwise: follows the Decision
//     returned with it: calls the handler if Allowed, else answers
//     codes.Unavailable, with RetryInfo when its RetryAfter is finite; no
//     fields, since the backend could not say what the quota is (counted
//     Errors);
//   - a key error: its own status, or codes.InvalidArgument (see Key; also
//     for an empty key, or one above MaxKeyBytes or the engine's
//     Config.MaxKeyBytes; codes.Internal for a peer that is not an IP
//     address under KeyByIP); a cost above the key's limit:
//     codes.FailedPrecondition with the fields; a negative cost or a limit
//     the engine rejected: codes.Internal (all counted Rejected).
//
// The fields (ratelimit-policy "name";q=<limit>;w=<window seconds>,
// ratelimit "name";r=<remaining>;t=<seconds>) have httplimit's values for
// the same limiter and policy. Chained interceptors each add their own
// value and charge independently; NewMultiInterceptor, over engines,
// charges none for a refusal. A stream is charged once, when it starts,
// with the fields in its header; with WithPerMessage each received message
// is charged, and a denial's fields go into the trailer.
type Interceptor struct {
	limiter adapter.Backend
	cfg     config
	fields  *adapter.Fields
	multi   *multi // NewMultiInterceptor's policies; nil for NewInterceptor
	// inFlight has bit i set when policy i (0 for NewInterceptor) gives
	// its units back after the handler (WithInFlight, Policy.InFlight),
	// settle when it is settled to the reported cost (WithSettle,
	// Policy.Settle); held is set when either is.
	inFlight, settle uint8
	held             bool
	counts           adapter.Counters
}

// Stats are an Interceptor's decision counters since it was built: one
// per unary call, per stream, or per message in per-message mode; exempt
// calls are not counted. They are read one by one, so a snapshot taken
// under load may count a decision in none of them yet; it never counts one
// twice.
type Stats struct {
	Allowed   uint64 // admitted by the limiter
	Denied    uint64 // ResourceExhausted, or Unavailable for MaxKeys
	Rejected  uint64 // refused before or instead of limiting: key errors, costs that never fit, bugs
	Errors    uint64 // the ContextLimiter failed; its failure policy decided
	Canceled  uint64 // the ContextLimiter failed after the call's context ended; no handler ran
	WouldDeny uint64 // WithDryRun: the limiter refused (ResourceExhausted, Unavailable for MaxKeys, FailedPrecondition), and the call was let through
	// SettleErrors counts the calls whose held units (WithInFlight,
	// WithSettle) the limiter would not give back or settle after the
	// handler: a debt it cannot count, a shared limiter's failure. A
	// call counts once however many of its policies failed, as in every
	// counter. Their units stay as reserved, until they leave the window.
	SettleErrors uint64
}

// NewInterceptor returns an Interceptor over l configured by opts.
//
// l is a Limiter (an *engine.Engine) or a ContextLimiter (a
// *redisstore.Limiter); anything else, or a nil l, is an error. If l has a
// Config() engine.Config method, the window and the algorithm for the
// fields come from it, as in httplimit.
//
// Every misconfiguration is an error here, naming the option and what it
// allows; errors of several options are joined.
func NewInterceptor(l any, opts ...Option) (*Interceptor, error) {
	i := &Interceptor{cfg: defaultConfig()}
	b, err := adapter.NewBackend(l)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: NewInterceptor: %w", err)
	}
	i.limiter = b
	errs := i.configure("NewInterceptor", opts)
	errs = append(errs, i.checkCosts("", l)...)
	errs = append(errs, checkHold("", l, b, i.cfg.inFlight, i.cfg.settle)...)
	if i.cfg.inFlight {
		i.inFlight = 1
	}
	if i.cfg.settle {
		i.settle = 1
	}
	i.held = i.cfg.inFlight || i.cfg.settle
	f, err := adapter.NewFields("grpclimit: ", "NewInterceptor", l, i.cfg.policyName, i.cfg.window)
	errs = append(errs, err)
	i.fields = f
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return i, nil
}

// configure applies opts and the defaults they leave.
func (i *Interceptor) configure(fn string, opts []Option) []error {
	errs := adapter.ApplyOptions("grpclimit: ", fn, &i.cfg, opts)
	if i.cfg.cost != nil && len(i.cfg.methodCost) > 0 {
		errs = append(errs, errors.New("grpclimit: WithCost and WithMethodCost cannot be combined; compute per-method costs in the WithCost function"))
	}
	errs = append(errs, i.cfg.checkHeld()...)
	if !i.cfg.noDefaults {
		for _, m := range DefaultExempt() {
			i.cfg.defaultExempt[m] = true
		}
	}
	return errs
}

// checkCosts refuses a WithMethodCost that no call could ever fit under
// limiter l's limit, when l reports one for every key. where names the
// policy, or is "".
func (i *Interceptor) checkCosts(where string, l any) []error {
	c, ok := l.(adapter.Configured)
	if !ok || adapter.IsNil(l) {
		return nil
	}
	lc := c.Config()
	if lc.KeyLimit != nil || lc.PerKeyLimits {
		return nil
	}
	var errs []error
	for m, cost := range i.cfg.methodCost {
		if cost > lc.Limit {
			errs = append(errs, fmt.Errorf("grpclimit: %sWithMethodCost(%s, %d): above the limiter's Limit %d, so no call could ever fit", where, untrusted.Quote(m), cost, lc.Limit))
		}
	}
	return errs
}

// mustInterceptor is NewInterceptor that panics, as regexp.MustCompile
// does.
func mustInterceptor(l any, opts []Option) *Interceptor {
	i, err := NewInterceptor(l, opts...)
	if err != nil {
		panic(err)
	}
	return i
}

// UnaryServerInterceptor returns NewInterceptor(l, opts...).Unary(), and
// panics if NewInterceptor returns an error: a misconfigured limiter stops
// the server at start-up, where its message names the bad option, rather
// than answering calls. Use NewInterceptor to share one Interceptor's
// counters between Unary and Stream, or to handle the error.
func UnaryServerInterceptor(l any, opts ...Option) grpc.UnaryServerInterceptor {
	return mustInterceptor(l, opts).Unary()
}

// StreamServerInterceptor returns NewInterceptor(l, opts...).Stream(), and
// panics if NewInterceptor returns an error (see UnaryServerInterceptor).
func StreamServerInterceptor(l any, opts ...Option) grpc.StreamServerInterceptor {
	return mustInterceptor(l, opts).Stream()
}

// Stats returns the counters.
func (i *Interceptor) Stats() Stats {
	return Stats(i.counts.Load())
}

// Unary returns the unary server interceptor.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if i.held {
			return i.unaryHeld(ctx, req, info, handler)
		}
		if err := i.limit(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Limit decides the call whose server context is ctx: it sets the fields
// as header metadata, and returns nil to admit it or the denial's status
// error. Its method comes from grpc.Method(ctx).
//
// It is the adapter for go-grpc-middleware v2: *Interceptor implements
// that package's ratelimit.Limiter, so ratelimit.UnaryServerInterceptor(i)
// and ratelimit.StreamServerInterceptor(i) limit with ringlimit. Those
// interceptors turn any error into codes.ResourceExhausted with the
// error's text, so the RetryInfo detail and codes.Unavailable of a backend
// failure are lost through them; the header metadata is not. Unary and
// Stream keep everything.
//
// Limit does not run the handler, so it cannot give units back or settle
// them after it: with WithInFlight or WithSettle it refuses every call
// with codes.Internal, naming the mistake; install Unary and Stream then.
func (i *Interceptor) Limit(ctx context.Context) error {
	if i.held {
		return errLimitHeld
	}
	method, _ := grpc.Method(ctx)
	return i.limit(ctx, method)
}

func (i *Interceptor) limit(ctx context.Context, method string) error {
	if i.exempt(ctx, method) {
		return nil
	}
	var md metadata.MD
	if i.multi != nil {
		keys, costs, err := i.prepareMulti(ctx, method)
		if err != nil {
			return passDryRun(err)
		}
		md, err = i.decideMulti(ctx, keys, costs, nil)
		if md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		return err
	}
	key, cost, err := i.prepare(ctx, method)
	if err != nil {
		return passDryRun(err)
	}
	md, err = i.decide(ctx, key, cost, nil)
	if md != nil {
		_ = grpc.SetHeader(ctx, md) // fails only once the header is sent: a handler's choice
	}
	return err
}

// passDryRun turns errDryRunPass into nil: the call goes on.
func passDryRun(err error) error {
	if err == errDryRunPass {
		return nil
	}
	return err
}

// decide asks the limiter for cost units of key and returns the fields to
// send (nil for none) and nil to admit, or the denial's status error. With
// held (one element), it reserves them and keeps what it admitted there.
func (i *Interceptor) decide(ctx context.Context, key string, cost int64, held []adapter.Held) (metadata.MD, error) {
	var d engine.Decision
	var err error
	if held != nil {
		cost = adapter.Reserved(cost, i.settle != 0) // an estimate of 0 reserves 1; hold keeps the estimate
		d, held[0], err = i.limiter.Reserve(ctx, key, cost)
	} else {
		d, err = i.limiter.AllowN(ctx, key, cost)
	}
	if err != nil {
		if gone := adapter.CallerGone(ctx, err); gone != nil {
			i.counts.Canceled.Add(1)
			return nil, status.FromContextError(gone).Err()
		}
		i.counts.Errors.Add(1)
		if d.Allowed || i.cfg.dryRun {
			return nil, nil
		}
		return nil, withRetry(codes.Unavailable, "grpclimit: rate limiter unavailable", d.RetryAfter)
	}
	if adapter.Classify(d, cost) == adapter.Admitted {
		i.counts.Allowed.Add(1)
		if adapter.Quiet(i.cfg.below, d) {
			return nil, nil
		}
		return i.md(nil, i.fields, d, i.fields.AdmittedReset(d.Remaining)), nil
	}
	return i.refuse(nil, i.fields, d, cost)
}

// refuse returns the fields (added to md) and the status error of a
// Decision d for cost units that did not admit, under policy f.
func (i *Interceptor) refuse(md metadata.MD, f *adapter.Fields, d engine.Decision, cost int64) (metadata.MD, error) {
	if i.cfg.dryRun {
		return i.dryRun(md, f, d, cost), nil
	}
	switch adapter.Classify(d, cost) {
	case adapter.Limited:
		i.counts.Denied.Add(1)
		return i.md(md, f, d, adapter.RetrySeconds(d.RetryAfter)),
			withRetry(codes.ResourceExhausted, "grpclimit: rate limited; retry after "+d.RetryAfter.String(), d.RetryAfter)
	case adapter.KeysFull:
		i.counts.Denied.Add(1)
		return md, withRetry(codes.Unavailable, "grpclimit: too many clients", d.RetryAfter)
	case adapter.TooCostly:
		i.counts.Rejected.Add(1)
		return i.md(md, f, d, -1), status.Error(codes.FailedPrecondition,
			"grpclimit: call cost "+strconv.FormatInt(cost, 10)+" exceeds the limit "+strconv.FormatInt(d.Limit, 10)+" per window")
	case adapter.KeyRefused:
		i.counts.Rejected.Add(1)
		return md, errLimiterKeyTooLong
	default: // adapter.Misconfigured
		i.counts.Rejected.Add(1)
		return md, status.Error(codes.Internal, "grpclimit: rate limit misconfigured for this client")
	}
}

// dryRun counts a Decision d that did not admit, under WithDryRun, as it
// would have been (a refusal as WouldDeny), and returns md with the fields
// its answer would have had; the call goes on.
func (i *Interceptor) dryRun(md metadata.MD, f *adapter.Fields, d engine.Decision, cost int64) metadata.MD {
	switch o := adapter.Classify(d, cost); {
	case o == adapter.Limited:
		i.counts.WouldDeny.Add(1)
		return i.md(md, f, d, adapter.RetrySeconds(d.RetryAfter))
	case o == adapter.TooCostly:
		i.counts.WouldDeny.Add(1)
		return i.md(md, f, d, -1)
	case o.Refusal():
		i.counts.WouldDeny.Add(1)
	default:
		i.counts.Rejected.Add(1)
	}
	return md
}

// errDryRunPass is what keyOf and costOf return under WithDryRun for a
// call they would have refused: it was counted, and goes on undecided.
var errDryRunPass = errors.New("grpclimit: dry run: let through")

// errLimiterKeyTooLong answers a key the limiter itself refused for its
// length (engine.ReasonKeyTooLong: an engine whose Config.MaxKeyBytes is
// below MaxKeyBytes).
var errLimiterKeyTooLong = status.Error(codes.InvalidArgument, "grpclimit: the key is longer than the limiter's cap (engine Config.MaxKeyBytes); refused, never truncated")

// md returns md with policy f's fields for d with t=reset (−1: none)
// added, or md as it is when the fields are off. A first md has its two
// values share one backing array.
func (i *Interceptor) md(md metadata.MD, f *adapter.Fields, d engine.Decision, reset int64) metadata.MD {
	if i.cfg.style == 0 {
		return md
	}
	p, r := f.Policy(d.Limit), f.RateLimit(d.Remaining, reset)
	if md == nil {
		vals := [...]string{p, r}
		return metadata.MD{MDPolicy: vals[0:1:1], MDRateLimit: vals[1:2:2]}
	}
	md[MDPolicy] = append(md[MDPolicy], p)
	md[MDRateLimit] = append(md[MDRateLimit], r)
	return md
}

// withRetry returns a status error of code with msg and, when retry is a
// finite positive wait, a RetryInfo detail carrying it exactly.
func withRetry(code codes.Code, msg string, retry time.Duration) error {
	st := status.New(code, msg)
	if retry > 0 && retry != engine.Never {
		if ds, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
			st = ds
		}
	}
	return st.Err()
}
