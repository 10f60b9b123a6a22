package httplimit

import (
	"context"

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
