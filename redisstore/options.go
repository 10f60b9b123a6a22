package redisstore

import (
	"fmt"
	"strings"
	"time"
)

// FailurePolicy is what AllowN decides when Redis is down (an error reply, a
// refused connection, a silence confirmed by the process's own clock; see
// WithBreaker). AllowN returns the failure policy's Decision together with
// an error wrapping ErrUnavailable, so that its answer is never mistaken
// for Redis's.
//
// A failure policy answers for the backend, never for the caller: a call
// whose caller's context ends before Redis answers (a client that went
// away, a deadline that passed) is admitted under no failure policy (see
// AllowN).
type FailurePolicy int

const (
	// FailClosed denies, the default: a broken Redis admits nothing. The
	// Decision has Remaining 0 and RetryAfter one sub-window.
	FailClosed FailurePolicy = iota
	// FailOpen admits, recording nothing.
	FailOpen
	// FallbackLocal decides with an in-process engine holding a share of
	// the limit (WithFallbackLocal); its Decision's Limit is that share. A
	// cost above the share but within the key's limit is denied with
	// RetryAfter one sub-window, not Never: it can fit once Redis answers.
	FallbackLocal
)

// String returns the failure policy's name: fail-closed, fail-open or fallback-local.
func (p FailurePolicy) String() string {
	switch p {
	case FailClosed:
		return "fail-closed"
	case FailOpen:
		return "fail-open"
	case FallbackLocal:
		return "fallback-local"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// Option configures a Limiter.
type Option func(*options) error

type options struct {
	policy  FailurePolicy
	share   float64
	onError func(error)
	prefix  string

	hybrid    bool
	interval  time.Duration
	maxLocal  int64
	replicas  int           // WithReplicas; 0: DefaultReplicas
	linger    time.Duration // WithLinger, if lingerSet; else DefaultLinger
	lingerSet bool
	manual    bool // tests: no background flusher or prober; the test drives them

	brSet        bool // WithBreaker was given
	brMin, brMax time.Duration
}

// WithFailurePolicy sets the failure policy: FailClosed (the default) or
// FailOpen. Use WithFallbackLocal for FallbackLocal.
func WithFailurePolicy(p FailurePolicy) Option {
	return func(o *options) error {
		if p != FailClosed && p != FailOpen {
			return fmt.Errorf("redisstore: WithFailurePolicy(%v): want FailClosed or FailOpen (FallbackLocal needs WithFallbackLocal)", p)
		}
		o.policy = p
		return nil
	}
}

// WithFallbackLocal selects FallbackLocal: while Redis fails, decisions come
// from an in-process engine whose limit is max(1, floor(share·Limit)),
// 0 < share ≤ 1. With R replicas, share = 1/R keeps the total near the limit.
func WithFallbackLocal(share float64) Option {
	return func(o *options) error {
		if !(share > 0 && share <= 1) {
			return fmt.Errorf("redisstore: WithFallbackLocal(%v): want 0 < share ≤ 1", share)
		}
		o.policy, o.share = FallbackLocal, share
		return nil
	}
}

// WithOnError sets a hook called once with every failed round trip to
// Redis: a decision's script call, a breaker's probe, or a hybrid limiter's
// flush, probe or exact decision (one call per flush, however many keys it
// carried); and with every Cancel, Settle or ChargeN that Redis did not
// apply (ErrNotApplied), the breaker open included. It runs before the failure policy decides, must be safe for concurrent
// use and should not block. Decisions answered by the failure policy while the
// breaker is open (WithBreaker) or a hybrid limiter is in its failure state
// make no round trip and do not call it. A decision whose caller's context
// ended first (Stats().CallerGone) is not a failure of Redis's and does not
// call it either, unless its round trip also failed with an error reply or
// a refused connection.
//
// It also gets warnings, which are not failures and are not counted in
// Stats: ErrUnboundedRoundTrip, once, from New, when the client's options
// let a round trip last forever (see New); ErrEvictionPolicy when Redis's
// maxmemory-policy is not noeviction (read at New and whenever the breaker
// closes after an outage), and ErrEvictionUnchecked, once, when the
// policy could not be read.
func WithOnError(f func(error)) Option {
	return func(o *options) error { o.onError = f; return nil }
}

// WithPrefix sets the prefix of every Redis key (default "ringlimit:").
// Limiters with different configurations must not share a prefix. The
// prefix must not contain '{' or '}'.
func WithPrefix(p string) Option {
	return func(o *options) error {
		if strings.ContainsAny(p, "{}") {
			return fmt.Errorf("redisstore: WithPrefix(%q): the prefix must not contain braces", p)
		}
		o.prefix = p
		return nil
	}
}
