package httplimit

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

// MaxKeyBytes is the longest key a Middleware passes to its limiter, in
// bytes: 256. A longer key, from any Key (KeyByHeader's value, a Compose or
// KeyByRoute of parts, a KeyFunc's result), is refused as a key error
// (400, or the WithKeyErrorHandler handler, counted Rejected) with a
// message naming the cap, and never truncated, since a cut key could merge
// two clients: the limiter keeps every key it is given (an engine for the
// key's life, Redis for a window), so keys of unbounded length are a
// memory denial of service. grpclimit has the same cap. Hash a longer
// credential in a KeyFunc.
const MaxKeyBytes = 256

// The grpclimit cap is the same constant; these fail to compile if the two
// ever differ.
var (
	_ [MaxKeyBytes - adapter.MaxKeyBytes]struct{}
	_ [adapter.MaxKeyBytes - MaxKeyBytes]struct{}
)

// errLimiterKeyTooLong answers a key the limiter itself refused for its
// length (engine.ReasonKeyTooLong: an engine whose Config.MaxKeyBytes is
// below MaxKeyBytes).
var errLimiterKeyTooLong = errors.New("httplimit: the key is longer than the limiter's cap (engine Config.MaxKeyBytes); refused, never truncated")

// Middleware limits requests with a Limiter or a ContextLimiter. Build it
// with NewMiddleware, wrap handlers with Handler, and read its counters
// with Stats. It is safe for concurrent use, and must not be copied after
// first use.
//
// For each request that is not exempt, it computes the key and the cost,
// asks the limiter for cost units, and (under WithDryRun, refusing
// nothing):
//
//   - admitted: sets the rate-limit fields and calls the next handler
//     (counted Allowed);
//   - limited: sets the rate-limit fields and Retry-After (whole seconds,
//     rounded up, at least 1) and answers 429 (counted Denied), by default
//     with {"error":"rate limited","retry_after_seconds":N} when Accept
//     prefers application/json, else "rate limited; retry after N s";
//   - a new key refused because the engine holds Config.MaxKeys keys: 503
//     with Retry-After and no rate-limit fields (counted Denied);
//   - a ContextLimiter error while the request's context was done: no
//     handler runs, 503 without Retry-After, whatever Decision came with
//     it (counted Canceled); any other ContextLimiter error: the Decision
//     returned with it is followed (counted Errors; see ContextLimiter);
//   - a key error, an empty key or one above MaxKeyBytes (400), a cost
//     above the limit (413), a negative cost or a limit the engine
//     rejected (500): counted Rejected.
//
// WithRefusalHandler answers any of these refusals instead; WriteRefusal
// writes the defaults.
//
// Each middleware adds one member to the RateLimit-Policy
// ("name";q=<limit>;w=<window seconds>) and RateLimit
// ("name";r=<remaining>;t=<seconds>) fields, so stacked middlewares show
// every policy; stacked middlewares charge independently, where NewMulti,
// over engines, charges none for a refusal. w= is sent only for a window
// of whole seconds. On a 429, t= is the Retry-After; on an admitted
// response it is an upper bound on when the key's whole quota is free
// again, from the limiter's Config (none when the limiter does not report
// it), counted from the limiter's clock; under WithSettle it bounds the
// reservation, not a later debt. docs/http.md gives each value's reasoning
// and its edges (sub-second windows, FixedWindow, clock steps and skew).
type Middleware struct {
	limiter adapter.Backend
	cfg     config
	fields  *adapter.Fields
	multi   *multi // NewMulti's policies; nil for NewMiddleware
	// inFlight has bit i set when policy i (0 for NewMiddleware) gives
	// its units back after the handler (WithInFlight, Policy.InFlight),
	// settle when it is settled to the reported cost (WithSettle,
	// Policy.Settle); held is set when either is.
	inFlight, settle uint8
	held             bool
	counts           adapter.Counters
}

// Stats are the middleware's request counters since it was built. They
// are read one by one, so a snapshot taken under load may count a request
// in none of them yet; it never counts one twice.
type Stats struct {
	Allowed   uint64 // passed to the next handler after the limiter admitted them
	Denied    uint64 // answered 429, or 503 for MaxKeys
	Rejected  uint64 // answered 400, 413 or 500 before or instead of limiting
	Errors    uint64 // the ContextLimiter failed; its failure policy decided
	Canceled  uint64 // the ContextLimiter failed after the request's context ended; no handler ran
	WouldDeny uint64 // WithDryRun: the limiter refused (429, 503 for MaxKeys, 413), and the request was let through
	// SettleErrors counts the requests whose held units (WithInFlight,
	// WithSettle) the limiter would not give back or settle after the
	// handler: a debt it cannot count, a shared limiter's failure. A
	// request counts once however many of its policies (NewMulti) failed,
	// as in every counter. Their units stay as reserved, until they leave
	// the window.
	SettleErrors uint64
}

// NewMiddleware returns a Middleware over l configured by opts.
//
// l is a Limiter (an *engine.Engine) or a ContextLimiter (a
// *redisstore.Limiter); anything else, or a nil l, is an error. If l has a
// Config() engine.Config method, the window and the algorithm come from it.
//
// Every misconfiguration is an error here, naming the option and what it
// allows: a bad argument to an Option or to a Key helper, a WithPolicyName
// window that disagrees with the limiter's. Errors of several options are
// joined.
func NewMiddleware(l any, opts ...Option) (*Middleware, error) {
	m := &Middleware{cfg: defaultConfig()}
	b, err := adapter.NewBackend(l)
	if err != nil {
		return nil, fmt.Errorf("httplimit: NewMiddleware: %w", err)
	}
	m.limiter = b
	errs := adapter.ApplyOptions("httplimit: ", "NewMiddleware", &m.cfg, opts)
	if m.cfg.inFlight && m.cfg.settle {
		errs = append(errs, errInFlightSettle)
	}
	errs = append(errs, checkHold("", l, b, m.cfg.inFlight, m.cfg.settle)...)
	if m.cfg.inFlight {
		m.inFlight = 1
	}
	if m.cfg.settle {
		m.settle = 1
	}
	m.held = m.cfg.inFlight || m.cfg.settle
	f, err := adapter.NewFields("httplimit: ", "NewMiddleware", l, m.cfg.policyName, m.cfg.window)
	m.fields = f
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, err
	}
	return m, nil
}

// New returns NewMiddleware(l, opts...).Handler, and panics if
// NewMiddleware returns an error, as regexp.MustCompile does: a
// misconfigured middleware stops the server at start-up, where its
// message names the bad option, rather than answering requests.
func New(l any, opts ...Option) func(http.Handler) http.Handler {
	m, err := NewMiddleware(l, opts...)
	if err != nil {
		panic(err)
	}
	return m.Handler
}

// Stats returns the counters.
func (m *Middleware) Stats() Stats {
	return Stats(m.counts.Load())
}

// Handler returns next wrapped by the middleware.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	for _, f := range m.cfg.exempt {
		if f(r) {
			next.ServeHTTP(w, r)
			return
		}
	}
	if m.multi != nil {
		m.serveMulti(w, r, next)
		return
	}
	key, ok := m.key(w, r, next, m.cfg.key)
	if !ok {
		return
	}
	cost, ok := m.cost(w, r, next)
	if !ok {
		return
	}
	if m.held {
		m.serveHeld(w, r, next, key, cost)
		return
	}
	d, err := m.limiter.AllowN(r.Context(), key, cost)
	if err != nil {
		if adapter.CallerGone(r.Context(), err) != nil {
			m.callerGone(w, r)
			return
		}
		m.limiterFailed(w, r, next, d, err)
		return
	}
	if adapter.Classify(d, cost) == adapter.Admitted {
		m.counts.Allowed.Add(1)
		m.writeRateHeaders(w.Header(), m.fields, d, m.fields.AdmittedReset(d.Remaining), false)
		next.ServeHTTP(w, r)
		return
	}
	m.refuse(w, r, next, d, cost, m.fields)
}

// key computes r's key with k; on an error (an empty key and a key above
// MaxKeyBytes included) it answers the request (under WithDryRun: passes
// it to next) and returns false.
func (m *Middleware) key(w http.ResponseWriter, r *http.Request, next http.Handler, k Key) (string, bool) {
	key, err := k.of(r)
	if err != nil {
		m.counts.Rejected.Add(1)
		if m.cfg.dryRun {
			next.ServeHTTP(w, r)
		} else {
			m.answer(w, r, Refusal{Kind: RefusalBadKey, Status: http.StatusBadRequest, Err: err, RetryAfter: -1})
		}
		return "", false
	}
	return key, true
}

// cost computes r's cost; a negative one is answered 500 (under
// WithDryRun: passed to next) and returns false.
func (m *Middleware) cost(w http.ResponseWriter, r *http.Request, next http.Handler) (int64, bool) {
	return m.costWith(w, r, next, m.cfg.cost)
}

// costWith is cost with f (nil: 1).
func (m *Middleware) costWith(w http.ResponseWriter, r *http.Request, next http.Handler, f func(*http.Request) int64) (int64, bool) {
	if f == nil {
		return 1, true
	}
	cost := f(r)
	if cost < 0 {
		m.counts.Rejected.Add(1)
		if m.cfg.dryRun {
			next.ServeHTTP(w, r)
		} else {
			m.answer(w, r, Refusal{Kind: RefusalMisconfigured, Status: http.StatusInternalServerError, Err: errNegativeCost, Cost: cost, RetryAfter: -1})
		}
		return 0, false
	}
	return cost, true
}

// refuse answers a Decision d for cost units that did not admit, with the
// fields of f; under WithDryRun it counts it and passes r to next.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, next http.Handler, d engine.Decision, cost int64, f *adapter.Fields) {
	if m.cfg.dryRun {
		m.dryRun(w, r, next, d, cost, f)
		return
	}
	ref := Refusal{Decision: d, Cost: cost, RetryAfter: -1}
	switch adapter.Classify(d, cost) {
	case adapter.Limited:
		m.counts.Denied.Add(1)
		h := w.Header()
		ref.RetryAfter = setRetryAfter(h, d.RetryAfter)
		m.writeRateHeaders(h, f, d, ref.RetryAfter, true)
		ref.Kind, ref.Status = RefusalLimited, http.StatusTooManyRequests
	case adapter.KeysFull:
		m.counts.Denied.Add(1)
		ref.RetryAfter = setRetryAfter(w.Header(), d.RetryAfter)
		ref.Kind, ref.Status = RefusalKeysFull, http.StatusServiceUnavailable
	case adapter.TooCostly:
		m.counts.Rejected.Add(1)
		m.writeRateHeaders(w.Header(), f, d, -1, true)
		ref.Kind, ref.Status = RefusalTooCostly, http.StatusRequestEntityTooLarge
	case adapter.KeyRefused:
		m.counts.Rejected.Add(1)
		ref.Kind, ref.Status, ref.Err = RefusalBadKey, http.StatusBadRequest, errLimiterKeyTooLong
	default: // adapter.Misconfigured
		m.counts.Rejected.Add(1)
		ref.Kind, ref.Status, ref.Err = RefusalMisconfigured, http.StatusInternalServerError, errLimitRejected
	}
	m.answer(w, r, ref)
}

// limiterFailed serves a request whose ContextLimiter returned err,
// following the failure policy's Decision d.
func (m *Middleware) limiterFailed(w http.ResponseWriter, r *http.Request, next http.Handler, d engine.Decision, err error) {
	m.counts.Errors.Add(1)
	if d.Allowed || m.cfg.dryRun {
		next.ServeHTTP(w, r)
		return
	}
	retry := int64(-1)
	if d.RetryAfter > 0 && d.RetryAfter != engine.Never {
		retry = setRetryAfter(w.Header(), d.RetryAfter)
	}
	m.answer(w, r, Refusal{Kind: RefusalUnavailable, Status: http.StatusServiceUnavailable, Decision: d, Err: err, RetryAfter: retry})
}

// callerGone answers a request whose context ended before its
// ContextLimiter answered: 503, and no handler. Writing nothing would
// not do: net/http turns a handler that writes nothing into 200 OK, and
// the context may have ended by a server-side deadline (an upstream
// context.WithTimeout, http.TimeoutHandler) with the client still waiting
// for an answer. A client that has left never reads the 503; nginx logs
// the same case as 499.
func (m *Middleware) callerGone(w http.ResponseWriter, r *http.Request) {
	m.counts.Canceled.Add(1)
	m.answer(w, r, Refusal{Kind: RefusalCallerGone, Status: http.StatusServiceUnavailable, Err: r.Context().Err(), RetryAfter: -1})
}

// dryRun serves a request the limiter did not admit, under WithDryRun:
// counted as it would have been (a refusal as WouldDeny), with the
// rate-limit fields of the answer it would have had, and passed to next.
func (m *Middleware) dryRun(w http.ResponseWriter, r *http.Request, next http.Handler, d engine.Decision, cost int64, f *adapter.Fields) {
	switch o := adapter.Classify(d, cost); {
	case o == adapter.Limited:
		m.counts.WouldDeny.Add(1)
		m.writeRateHeaders(w.Header(), f, d, adapter.RetrySeconds(d.RetryAfter), true)
	case o == adapter.TooCostly:
		m.counts.WouldDeny.Add(1)
		m.writeRateHeaders(w.Header(), f, d, -1, true)
	case o.Refusal():
		m.counts.WouldDeny.Add(1)
	default:
		m.counts.Rejected.Add(1)
	}
	next.ServeHTTP(w, r)
}
