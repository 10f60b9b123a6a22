package httplimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Limiter is the in-process shape a Middleware accepts: *engine.Engine
// has it.
type Limiter interface {
	AllowN(key string, n int64) engine.Decision
}

// ContextLimiter is the shape of a limiter that can fail, such as
// *redisstore.Limiter; a Middleware accepts it as directly as a Limiter.
// The request's context is passed to AllowN.
//
// A non-nil error means the backend could not decide, and the Decision
// returned with it is its failure policy's answer (a fail-closed denial, a
// fail-open admission, or a local fallback's decision). The middleware
// follows that Decision: it admits if Allowed, and otherwise answers 503
// Service Unavailable with Retry-After when RetryAfter is finite and
// positive. It counts the request as Errors, not Allowed or Denied, and
// writes no rate-limit fields, since the backend could not say what the
// quota is.
//
// An error that comes while the request's context is done (the client
// went away, or a deadline set upstream passed) is not a backend failure
// and never buys a handler run: the failure policy answers for the
// backend, never for the caller, so even a fail-open Decision is ignored.
// The middleware answers 503 (see Middleware) and counts it Canceled. A
// Decision returned without an error is followed as usual: an admission
// the limiter counted is served even if the context ended meanwhile.
type ContextLimiter interface {
	AllowN(ctx context.Context, key string, n int64) (engine.Decision, error)
}

// Backend is a limiter of either shape an adapter accepts, a Limiter or a
// ContextLimiter, asked through one method. NewMiddleware and grpclimit
// build theirs with NewBackend. The zero Backend is not usable.
type Backend struct {
	local  Limiter
	remote ContextLimiter
}

// NewBackend wraps l, a Limiter or a ContextLimiter. Its error says what l
// is instead, for the caller to prefix with its own name.
func NewBackend(l any) (Backend, error) {
	if isNil(l) {
		return Backend{}, fmt.Errorf("nil limiter (%T)", l)
	}
	switch l := l.(type) {
	case Limiter:
		return Backend{local: l}, nil
	case ContextLimiter:
		return Backend{remote: l}, nil
	}
	return Backend{}, fmt.Errorf("%T is not a limiter; want AllowN(key string, n int64) engine.Decision (Limiter, as *engine.Engine) or AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) (ContextLimiter, as *redisstore.Limiter)", l)
}

// AllowN asks the limiter for n units of key; ctx reaches a ContextLimiter
// only. A Limiter never fails; a ContextLimiter's error comes with its
// failure policy's Decision (see ContextLimiter).
func (b Backend) AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) {
	if b.local != nil {
		return b.local.AllowN(key, n), nil
	}
	return b.remote.AllowN(ctx, key, n)
}

// Configured is implemented by limiters that report their configuration,
// as *engine.Engine does. The middleware reads the window and the
// algorithm from it once, at construction, for the w= and t= parameters.
type Configured interface {
	Config() engine.Config
}

// admittedReset returns a true upper bound on how long the units a key
// holds now can keep counting, for the t= of an admitted response: after
// that long with no further traffic on the key, its whole quota is free
// again. w is the sub-window width, W/N.
//
//   - SlidingWindow: a unit admitted at now lands in the sub-window k that
//     holds now, which starts at s ≤ now. A decision at time u reads the
//     sub-window of u and the N before it (the oldest one weighted). From
//     u ≥ s + (N+1)·w = s + W + w on, the sub-window of u is at least
//     k + N + 1, so the oldest one read is at least k + 1: the unit no
//     longer counts. s + W + w ≤ now + W + w.
//   - SlidingWindowStrict: reads the same N+1 sub-windows, all in full;
//     the same bound.
//   - FixedWindow: a unit counts until the end of its Unix-aligned window,
//     at most W after now. The middleware sends that end exactly
//     (Fields.AdmittedReset); this bound is its ceiling.
//   - SlidingLog: a unit admitted at s counts while u − W < s, so until
//     s + W ≤ now + W.
//
// "now" is the key's own time: the engine clamps a decision to the newest
// sub-window (or log time) the key has seen, so under concurrent requests
// a unit can land in a sub-window that another caller's clock reading
// opened, later than this caller's reading by the gap between the two
// reads. The t= value is rounded up to whole seconds, which covers that
// gap except when W + w is a whole number of seconds and the gap is
// positive; it is advisory there, as the draft's t= is (section 4.1.2).
// The bound is tight for the sliding algorithms: a unit admitted at the
// start of a sub-window counts (SlidingWindow: with a weight falling to 0)
// until W + w later. The denial of a full key says the same or
// less: its RetryAfter is when the oldest units it needs have left.
func admittedReset(c engine.Config) time.Duration {
	switch c.Algorithm {
	case engine.FixedWindow, engine.SlidingLog:
		return c.Window
	}
	n := c.SubWindows
	if n <= 0 {
		n = engine.DefaultSubWindows
	}
	return c.Window + c.Window/time.Duration(n)
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
