package httplimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

// ReservingLimiter is the shape of a shared limiter that can hold a
// request's units across its handler, for WithInFlight and WithSettle: a
// ContextLimiter whose ReserveN decides as AllowN and, when it admits,
// returns a SettleFunc that settles those units once. *engine.Engine holds
// units in-process (engine.Reservation) and needs no such method.
type ReservingLimiter interface {
	ContextLimiter
	ReserveN(ctx context.Context, key string, n int64) (engine.Decision, SettleFunc, error)
}

// SettleFunc settles units a ReservingLimiter reserved, to actual ≥ 0
// (0 gives them all back; after an admission of n = 0, actual units are
// charged), as engine.Reservation.Settle does; the
// middleware calls it at most once, after the handler, on a context
// without the request's cancellation. An error leaves the units as
// reserved, to leave the window with it; the middleware counts it in
// Stats.SettleErrors. grpclimit.SettleFunc is the same type.
type SettleFunc = func(ctx context.Context, actual int64) (engine.Decision, error)

// ErrNoSettle is ReportCost's error when no middleware with WithSettle
// runs around the handler. It is grpclimit.ErrNoSettle too.
var ErrNoSettle = adapter.ErrNoSettle

// ReportCost reports the actual cost of the request whose context is ctx
// (r.Context() in the handler) to the middlewares with WithSettle around
// the handler, which settle their reservation to it when the handler
// returns. The last report before then wins. A negative n is an error and
// changes nothing; so is a ctx with no settling middleware (ErrNoSettle).
// It is safe to call from any goroutine; a report allocates nothing.
func ReportCost(ctx context.Context, n int64) error {
	return adapter.Report(ctx, n, "httplimit: ", errNoSettle)
}

// errNoSettle is ReportCost's ErrNoSettle, built once.
var errNoSettle = adapter.NoSettle("httplimit: ")

// WithSettle makes the cost an estimate: the middleware reserves it
// (WithCost's, or 1) before the handler, and when the handler returns
// settles the reservation to what the handler reported with
// ReportCost(r.Context(), n). Fewer units go back; more are charged past
// the limit, a debt later requests wait out (tokens per minute for an LLM
// gateway). No report keeps the estimate, two settle to the last; a panic
// settles to what was reported before it, else keeps the estimate; a
// client that hangs up is still settled. An estimate of 0 reserves 1 unit,
// given back by a report of 0. A settle the limiter refuses
// (engine.ErrDebtFull, a shared limiter's failure) keeps the estimate
// and counts in Stats.SettleErrors.
//
// The rate-limit fields carry the reservation's values: they go out
// before the cost is known, so an admitted t= bounds the units reserved,
// not a debt charged when the handler returns.
//
// It needs an *engine.Engine or a ReservingLimiter, and cannot be combined
// with WithInFlight; with NewMulti it settles every policy not in flight.
// docs/http.md ("Costs known afterwards") has the details.
func WithSettle() Option {
	return func(c *config) error { c.settle = true; return nil }
}

// WithInFlight makes the limit count requests in flight: the middleware
// reserves a request's cost before the handler and gives it back when the
// handler returns, normally or by a panic, so that Limit is the most units
// running at once per key.
//
// The limiter's Window is then a lease: a unit never given back (a
// hijacked connection, a handler that never returns, a process that died)
// stops counting when it leaves the window, so choose a Window longer than
// the longest request. A refusal's Retry-After is when the oldest lease
// ends: an upper bound. FixedWindow and TokenBucket engines are refused.
//
// It needs an *engine.Engine or a ReservingLimiter, and cannot be combined
// with WithSettle; with NewMulti it puts every policy in flight,
// Policy.InFlight one. docs/http.md ("Requests in flight") has each
// algorithm's lease and where http.TimeoutHandler goes.
func WithInFlight() Option {
	return func(c *config) error { c.inFlight = true; return nil }
}

// checkHold checks WithInFlight and WithSettle against the limiter l of
// backend b, named where (a policy, or "").
func checkHold(where string, l any, b adapter.Backend, inFlight, settle bool) []error {
	var errs []error
	if inFlight {
		if err := adapter.CheckHold("WithInFlight", l, b); err != nil {
			errs = append(errs, fmt.Errorf("httplimit: %s%w", where, err))
		}
	}
	if settle {
		if err := adapter.CheckHold("WithSettle", l, b); err != nil {
			errs = append(errs, fmt.Errorf("httplimit: %s%w", where, err))
		}
	}
	return errs
}

// errInFlightSettle is the construction error of WithInFlight with
// WithSettle on one limit.
var errInFlightSettle = errors.New("httplimit: WithInFlight and WithSettle cannot be combined: WithInFlight gives every unit back, leaving nothing to settle (with NewMulti, put some policies in flight with Policy.InFlight and settle the others)")

// serveHeld is serve for a middleware that holds a request's units across
// its handler (WithInFlight, WithSettle).
func (m *Middleware) serveHeld(w http.ResponseWriter, r *http.Request, next http.Handler, key string, cost int64) {
	est := cost // settled from: an estimate of 0 reserves 1 (adapter.Reserved)
	cost = adapter.Reserved(cost, m.settle != 0)
	d, h, err := m.limiter.Reserve(r.Context(), key, cost)
	if err != nil {
		if adapter.CallerGone(r.Context(), err) != nil {
			m.callerGone(w, r)
			return
		}
		m.limiterFailed(w, r, m.failedHeld(next, h, cost), d, err)
		return
	}
	if adapter.Classify(d, cost) == adapter.Admitted {
		m.counts.Allowed.Add(1)
		m.writeRateHeaders(w.Header(), m.fields, d, m.fields.AdmittedReset(d.Remaining), false)
		held, costs := [1]adapter.Held{h}, [1]int64{est}
		m.run(w, r, next, held[:], costs[:])
		return
	}
	m.refuse(w, r, m.unheld(next), d, cost, m.fields)
}

// failedHeld is next for a request a failure policy admitted: most hold
// nothing (unheld), but a ReservingLimiter's policy may hold units
// (redisstore's FallbackLocal, in its local engine), given back or
// settled after the handler as an admission's.
func (m *Middleware) failedHeld(next http.Handler, h adapter.Held, cost int64) http.Handler {
	if h.Units() == 0 {
		return m.unheld(next)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held, costs := [1]adapter.Held{h}, [1]int64{cost}
		m.run(w, r, next, held[:], costs[:])
	})
}

// unheld is next for a request that holds nothing (a failure policy's
// admission, WithDryRun's let-through), whose handler still gets ReportCost.
func (m *Middleware) unheld(next http.Handler) http.Handler {
	if m.settle == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.run(w, r, next, nil, nil) })
}

// run calls next with what the request holds: a cell for ReportCost (when
// a policy settles) and, when one is in flight, a writer that notes a
// Hijack; when next returns or panics, it gives back or settles held, whose
// estimates are costs (policy i is in flight when bit i of m.inFlight is
// set, settled when bit i of m.settle is).
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, held []adapter.Held, costs []int64) {
	var cell *adapter.Reported
	if m.settle != 0 {
		var ctx context.Context
		ctx, cell = adapter.WithReported(r.Context())
		r = r.WithContext(ctx)
	}
	if len(held) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	var hw *heldWriter
	if m.inFlight != 0 {
		hw = &heldWriter{ResponseWriter: w}
		w = hw
	}
	defer m.finish(r.Context(), held, cell, hw, costs)
	next.ServeHTTP(w, r)
}

// finish ends what the request held (adapter.Finish), as the handler
// returns or panics; a hijacked connection keeps its units in flight.
func (m *Middleware) finish(ctx context.Context, held []adapter.Held, cell *adapter.Reported, hw *heldWriter, costs []int64) {
	if adapter.Finish(ctx, held, m.inFlight, m.settle, hw != nil && hw.hijacked.Load(), cell, costs) {
		m.counts.SettleErrors.Add(1)
	}
}

// heldWriter notes whether the handler hijacked the connection. Unwrap
// lets http.ResponseController reach the writer underneath.
type heldWriter struct {
	http.ResponseWriter
	hijacked atomic.Bool // atomic: a handler may hijack from a goroutine it waits for
}

// Flush flushes the writer underneath, if it can.
func (w *heldWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack hands the connection to the handler: the request stays in flight
// until its lease ends.
func (w *heldWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked.Store(true)
	}
	return c, rw, err
}

func (w *heldWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
