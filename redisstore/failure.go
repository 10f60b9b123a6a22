package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// ErrUnavailable is wrapped by the error AllowN returns with a decision
// made by the failure policy rather than by Redis: Redis is down (an error
// reply, a refused connection, a silence confirmed; see WithBreaker), the
// breaker is open, or a hybrid limiter is in its failure state. The error
// wraps the backend's cause too, and never a context's error. Close wraps
// it when units could not be recorded. It is never wrapped by the error of
// a call whose caller's context ended first: that wraps the context's
// error instead (see AllowN).
var ErrUnavailable = errors.New("redisstore: Redis unavailable, the failure policy decided")

// ErrNoReply is wrapped by the error AllowN returns when its round trip
// got no answer (the client's own timeout, a connection lost mid-call, no
// connection free in the client's pool) while Redis answers, as a
// confirmation showed: the process was short of CPU, a connection was
// killed, the application holds the pool, or the client's timeouts are
// shorter than Redis's replies. Redis is not down, so no failure policy
// decides: nothing is admitted, and Redis may have counted the call.
var ErrNoReply = errors.New("redisstore: no reply to this call, though Redis answers: nothing admitted (Redis may have counted the call)")

// unavailable wraps cause as a policy answer's error.
func unavailable(key string, cause error) error {
	return fmt.Errorf("%w (key %q): %w", ErrUnavailable, key, backendCause(cause))
}

// fail judges a decision's failed round trip for the breaker (judge, or
// the sender did) and answers the caller. It is the one place a failed
// decision becomes an answer:
//
//   - the caller's context has ended (it went away, or its deadline
//     passed), before or while the verdict was pending: nobody waits for
//     a policy answer, and admitting one would let a caller buy an
//     admission with its own cancel. The answer is gone's: nothing
//     admitted, whatever the policy.
//   - Redis is down (a proof, a confirmed silence, an open breaker) or
//     refused this key (WRONGTYPE): the failure is counted and reported,
//     and the failure policy answers.
//   - Redis answers (the confirmation found it alive): the failure is
//     counted and reported, and the answer is ErrNoReply's: nothing
//     admitted, no policy. A busy process is not an outage.
//
// The breaker judges the failure the same way whether or not the caller
// still waits: a stall seen through callers' deadlines still opens it.
func (l *Limiter) fail(ctx context.Context, key string, n, limit int64, err error) (engine.Decision, error) {
	return l.failWith(ctx, key, n, limit, err, nil)
}

// failWith is fail whose policy answer, when the policy answers, comes
// from answer if it is not nil: a reservation's (reserve.go), which
// FallbackLocal holds in its engine.
func (l *Limiter) failWith(ctx context.Context, key string, n, limit int64, err error, answer func() engine.Decision) (engine.Decision, error) {
	var v *verdict
	var judged *judgedError
	if errors.As(err, &judged) {
		err, v = judged.err, judged.v // the sender judged it already
	} else {
		v = l.judge(ctx, key, err)
	}
	if cerr := ctxDone(ctx); cerr != nil {
		return l.gone(key, limit, cerr, err)
	}
	down := keyError(err) || classify(err) == proof
	if !down && v != nil {
		cause, ok := v.wait(ctx.Done())
		if !ok {
			return l.gone(key, limit, ctx.Err(), err)
		}
		down = cause != nil
	}
	l.failures.Add(1)
	if !down {
		e := fmt.Errorf("%w (key %q): %w", ErrNoReply, key, backendCause(err))
		l.report(e)
		l.noReply.Add(1)
		return engine.Decision{Limit: limit}, e
	}
	l.report(fmt.Errorf("redisstore: key %q: %w", key, err))
	l.fallbacks.Add(1)
	if answer != nil {
		return answer(), unavailable(key, err)
	}
	return l.policy(key, n, limit), unavailable(key, err)
}

// gone is the answer to a caller whose context ended (cerr) before Redis
// answered its decision: a zero Decision (Allowed false, Limit set), and
// an error that wraps cerr and never ErrUnavailable, so that no failure
// policy can admit it. cause is the round trip's own error, nil when none
// was made; its text says whether Redis may have counted the call. It is
// counted in Stats().CallerGone and not passed to the OnError hook, unless
// cause shows Redis failing whatever the caller did (an error reply, a
// refused connection): that is a backend failure too, counted in Failures
// and reported.
func (l *Limiter) gone(key string, limit int64, cerr, cause error) (engine.Decision, error) {
	l.callerGone.Add(1)
	if cause == nil {
		return engine.Decision{Limit: limit}, cerr
	}
	if classify(cause) == proof {
		l.failures.Add(1)
		l.report(fmt.Errorf("redisstore: key %q: %w", key, cause))
	}
	const msg = "redisstore: key %q: nothing admitted, the caller's context ended before Redis answered: "
	switch {
	case errors.Is(cause, ErrUnavailable): // never from a round trip; kept out of the chain all the same
		return engine.Decision{Limit: limit}, fmt.Errorf(msg+"%v: %w", key, cause, cerr)
	case errors.Is(cause, cerr):
		return engine.Decision{Limit: limit}, fmt.Errorf(msg+"%w", key, cause)
	}
	return engine.Decision{Limit: limit}, fmt.Errorf(msg+"%w (%w)", key, cause, cerr)
}

// report passes a failed round trip to the OnError hook, if any.
func (l *Limiter) report(err error) {
	if l.opts.onError != nil {
		l.opts.onError(err)
	}
}

// policy is the failure policy's Decision for n units of key, whose limit
// is limit.
func (l *Limiter) policy(key string, n, limit int64) engine.Decision {
	if n < 0 || n > limit {
		return engine.Decision{Limit: limit, RetryAfter: engine.Never}
	}
	switch l.opts.policy {
	case FailOpen:
		return engine.Decision{Allowed: true, Limit: limit, Remaining: max(0, limit-n)}
	case FallbackLocal:
		d := l.local.AllowN(key, n)
		if !d.Allowed && d.RetryAfter == engine.Never {
			// n is above the local share but within the key's limit: it
			// can fit once Redis answers, so not Never.
			d.RetryAfter = time.Duration(l.width)
		}
		return d
	}
	if n == 0 {
		return engine.Decision{Allowed: true, Limit: limit}
	}
	return engine.Decision{Limit: limit, RetryAfter: time.Duration(l.width)}
}
