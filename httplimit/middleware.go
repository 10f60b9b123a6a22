package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/engine"
)

// Limiter is what the middleware needs; *engine.Engine satisfies it as it
// is.
type Limiter interface {
	AllowN(key string, n int64) engine.Decision
}

// Middleware limits requests with a Limiter. Build it with NewMiddleware,
// wrap handlers with Handler, and read its counters with Stats. It is safe
// for concurrent use.
//
// For each request that is not exempt, it computes the key and the cost,
// asks the Limiter for cost units, and:
//
//   - admitted: sets the rate-limit headers and calls the next handler
//     (counted Allowed);
//   - limited: sets the rate-limit headers and Retry-After (whole seconds,
//     rounded up, at least 1) and answers 429 through the deny handler
//     (counted Denied). The default body is {"error":"rate limited",
//     "retry_after_seconds":N} when Accept prefers application/json, else
//     "rate limited; retry after N s";
//   - refused because the engine holds Config.MaxKeys keys: answers 503
//     with Retry-After (counted Denied);
//   - a key error, a cost ≤ 0, a cost above the limit (413) or a limit the
//     engine rejected (500): counted Rejected.
type Middleware struct {
	l         Limiter
	cfg       config
	windowSec int64

	allowed  atomic.Uint64
	_        [56]byte // keep the hot counters on separate cache lines
	denied   atomic.Uint64
	_        [56]byte
	rejected atomic.Uint64
}

// Stats are the middleware's request counters since it was built.
type Stats struct {
	Allowed  uint64 // passed to the next handler
	Denied   uint64 // answered 429, or 503 for MaxKeys
	Rejected uint64 // answered 400, 413 or 500 before or instead of limiting
}

// NewMiddleware returns a Middleware over l configured by opts.
func NewMiddleware(l Limiter, opts ...Option) *Middleware {
	m := &Middleware{l: l, cfg: defaultConfig()}
	for _, o := range opts {
		o(&m.cfg)
	}
	if m.cfg.key == nil {
		m.cfg.key = KeyByIP(64)
	}
	if m.cfg.keyErr == nil {
		m.cfg.keyErr = defaultKeyError
	}
	m.windowSec = ceilSeconds(m.cfg.window)
	return m
}

// New is shorthand for NewMiddleware(l, opts...).Handler.
func New(l Limiter, opts ...Option) func(http.Handler) http.Handler {
	return NewMiddleware(l, opts...).Handler
}

// Stats returns the counters.
func (m *Middleware) Stats() Stats {
	return Stats{Allowed: m.allowed.Load(), Denied: m.denied.Load(), Rejected: m.rejected.Load()}
}

// Handler returns next wrapped by the middleware.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.cfg.exempt != nil && m.cfg.exempt(r) {
		next.ServeHTTP(w, r)
		return
	}
	key, err := m.cfg.key(r)
	if err != nil {
		m.rejected.Add(1)
		m.cfg.keyErr(w, r, err)
		return
	}
	cost := int64(1)
	if m.cfg.cost != nil {
		if cost = m.cfg.cost(r); cost <= 0 {
			m.rejected.Add(1)
			plainError(w, http.StatusBadRequest, "request cost "+strconv.FormatInt(cost, 10)+" is not positive")
			return
		}
	}
	d := m.l.AllowN(key, cost)
	switch d.Reason() {
	case engine.ReasonOK:
		m.allowed.Add(1)
		reset := int64(-1)
		if m.windowSec > 0 {
			reset = m.windowSec
		}
		m.writeRateHeaders(w.Header(), d, reset)
		next.ServeHTTP(w, r)
	case engine.ReasonLimited:
		m.denied.Add(1)
		h := w.Header()
		retry := setRetryAfter(h, d.RetryAfter)
		m.writeRateHeaders(h, d, retry)
		if m.cfg.deny != nil {
			m.cfg.deny.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, d)))
			return
		}
		writeDenial(w, r, http.StatusTooManyRequests, retry)
	case engine.ReasonKeysFull:
		m.denied.Add(1)
		retry := setRetryAfter(w.Header(), d.RetryAfter)
		writeDenial(w, r, http.StatusServiceUnavailable, retry)
	default: // ReasonNever
		m.rejected.Add(1)
		if cost > d.Limit && d.Limit > 0 {
			m.writeRateHeaders(w.Header(), d, -1)
			plainError(w, http.StatusRequestEntityTooLarge,
				"request cost "+strconv.FormatInt(cost, 10)+" exceeds the limit "+
					strconv.FormatInt(d.Limit, 10)+" per window")
			return
		}
		plainError(w, http.StatusInternalServerError, "rate limit misconfigured for this client")
	}
}
