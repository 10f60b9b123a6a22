// Package redisstore is ringlimit's sliding window shared across processes
// on Redis: the engine's algorithms (SlidingWindow, SlidingWindowStrict,
// FixedWindow) and its Decision, decided atomically by one Lua script per
// request, with Redis TIME as the one time source.
//
// Every request runs one script (EVALSHA, with EVAL on an explicit NOSCRIPT)
// that reads the key's N+1 sub-window counters, decides with the engine's
// exact integer comparison, and adds n if it fits, all in one atomic step.
// A key's counters live in one hash whose name carries a hash tag built from
// the escaped user key, so a request touches one Cluster slot.
//
// The script reads TIME and then writes, which needs effects replication
// (the default since Redis 5, the only mode since Redis 7); on older
// servers the script calls redis.replicate_commands() first.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// MaxExact is 2^53: every integer the script computes must stay below it,
// because Lua's numbers are doubles.
const MaxExact = int64(1) << 53

// Policy is what AllowN decides when Redis cannot be asked (a connection
// error, a timeout, a cancelled context, a script error).
type Policy int

const (
	// FailClosed denies, the default: a broken Redis admits nothing. The
	// Decision has Remaining 0 and RetryAfter one sub-window.
	FailClosed Policy = iota
	// FailOpen admits, recording nothing.
	FailOpen
	// FallbackLocal decides with an in-process engine holding a share of
	// the limit (WithFallbackLocal).
	FallbackLocal
)

func (p Policy) String() string {
	switch p {
	case FailClosed:
		return "fail-closed"
	case FailOpen:
		return "fail-open"
	case FallbackLocal:
		return "fallback-local"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Option configures a Limiter.
type Option func(*options) error

type options struct {
	policy  Policy
	share   float64
	onError func(error)
	prefix  string

	hybrid   bool
	interval time.Duration
	maxLocal int64
}

// WithPolicy sets the failure policy: FailClosed (the default) or FailOpen.
// Use WithFallbackLocal for FallbackLocal.
func WithPolicy(p Policy) Option {
	return func(o *options) error {
		if p != FailClosed && p != FailOpen {
			return fmt.Errorf("redisstore: WithPolicy(%v): want FailClosed or FailOpen (FallbackLocal needs WithFallbackLocal)", p)
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

// WithOnError sets a hook called with every Redis failure (before the
// policy decides). It must be safe for concurrent use and should not block.
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

// Stats counts a Limiter's outcomes.
type Stats struct {
	Decisions         uint64 // decisions answered by Redis
	Failures          uint64 // Redis calls that failed (each also sent to the OnError hook)
	FallbackDecisions uint64 // decisions made by the failure policy
	NoScript          uint64 // NOSCRIPT replies, answered by one EVAL
}

// Limiter is a rate limiter whose state lives in Redis. It is safe for
// concurrent use.
type Limiter struct {
	client   redis.UniversalClient
	cfg      engine.Config
	opts     options
	width    int64 // sub-window width, ns
	span     int
	weighted bool
	args     []any // limit, w µs, span, weighted, ttl ms (after n)
	local    *engine.Engine
	hyb      *hybrid

	closeOnce sync.Once

	decisions, failures, fallbacks, noscript atomic.Uint64
}

var script = redis.NewScript(luaSource)

// New returns a Limiter for cfg on client. cfg is validated as engine.New
// validates it, and further: Algorithm must not be SlidingLog, KeyLimit and
// PerKeyLimits are not supported, the sub-window width must be a whole
// number of microseconds (Redis TIME's resolution), Window plus two
// sub-windows must be below 2^53 ns (about 104 days), and with
// SlidingWindow Limit × sub-window width (ns) must be below 2^53 (so the
// weighted comparison is exact in Lua's doubles; e.g. Limit < 9,007,199 at a
// 1 s sub-window). Clock, CoarseClock, Shards, MaxKeys and DisableEviction
// are ignored: time is Redis TIME and keys expire by TTL.
func New(client redis.UniversalClient, cfg engine.Config, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	o := options{prefix: "ringlimit:"}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if cfg.Algorithm == engine.SlidingLog {
		return nil, errors.New("redisstore: Config.Algorithm = SlidingLog is not supported; use SlidingWindowStrict for a hard bound")
	}
	if cfg.KeyLimit != nil || cfg.PerKeyLimits {
		return nil, errors.New("redisstore: Config.KeyLimit and Config.PerKeyLimits are not supported: use one Limiter per limit")
	}
	vc := cfg
	vc.Clock, vc.CoarseClock = nil, 0
	vc.DisableEviction = true
	e, err := engine.New(vc) // validation, once
	if err != nil {
		return nil, err
	}
	_ = e.Close()

	l := &Limiter{client: client, cfg: cfg, opts: o, weighted: cfg.Algorithm == engine.SlidingWindow}
	n := cfg.SubWindows
	if n == 0 {
		n = engine.DefaultSubWindows
	}
	if cfg.Algorithm == engine.FixedWindow {
		l.width, l.span = int64(cfg.Window), 0
	} else {
		l.width, l.span = int64(cfg.Window)/int64(n), n
	}
	if err := l.checkBounds(); err != nil {
		return nil, err
	}
	ttl := (int64(cfg.Window) + l.width + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	w := "0"
	if l.weighted {
		w = "1"
	}
	l.args = []any{cfg.Limit, l.width / 1000, l.span, w, ttl}
	if o.policy == FallbackLocal {
		lc := cfg
		lc.Limit = max(1, int64(math.Floor(o.share*float64(cfg.Limit))))
		lc.Clock, lc.CoarseClock, lc.DisableEviction = nil, 0, false
		if l.local, err = engine.New(lc); err != nil {
			return nil, fmt.Errorf("redisstore: the fallback engine: %w", err)
		}
	}
	if o.hybrid {
		if err := l.startHybrid(); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	return l, nil
}

func (l *Limiter) checkBounds() error {
	if l.width%1000 != 0 {
		return fmt.Errorf("redisstore: the sub-window width %v is not a whole number of microseconds (Redis TIME's resolution): choose Window and SubWindows so that Window/SubWindows is", time.Duration(l.width))
	}
	if int64(l.cfg.Window) >= MaxExact-2*l.width {
		return fmt.Errorf("redisstore: Config.Window = %v: Window plus two sub-windows must be below 2^53 ns (about 104 days) for the script's exact arithmetic", l.cfg.Window)
	}
	if l.weighted && l.cfg.Limit > (MaxExact-1)/l.width {
		return fmt.Errorf("redisstore: Config.Limit = %d with a %v sub-window: SlidingWindow needs Limit × sub-window width (ns) < 2^53 for an exact comparison in Lua; want Limit ≤ %d, or a shorter sub-window, or SlidingWindowStrict", l.cfg.Limit, time.Duration(l.width), (MaxExact-1)/l.width)
	}
	return nil
}

// Close stops the hybrid flusher (after a last flush) and releases the
// fallback engine, if any. It does not close the client.
func (l *Limiter) Close() error {
	if l.hyb != nil {
		l.closeOnce.Do(func() { close(l.hyb.stop) })
		<-l.hyb.done
	}
	if l.local != nil {
		return l.local.Close()
	}
	return nil
}

// Stats returns the counters so far.
func (l *Limiter) Stats() Stats {
	return Stats{Decisions: l.decisions.Load(), Failures: l.failures.Load(), FallbackDecisions: l.fallbacks.Load(), NoScript: l.noscript.Load()}
}

// Key returns the Redis key holding user key k's counters: the prefix, then
// the escaped key inside one hash tag. Escaping maps '\' to "\\", '{' to
// "\(" and '}' to "\)", so the tag always ends at the closing brace added
// here and distinct user keys stay distinct.
func (l *Limiter) Key(k string) string {
	var b strings.Builder
	b.Grow(len(l.opts.prefix) + len(k) + 2)
	b.WriteString(l.opts.prefix)
	b.WriteByte('{')
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '{':
			b.WriteString(`\(`)
		case '}':
			b.WriteString(`\)`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('}')
	return b.String()
}

// Allow is AllowN(ctx, key, 1).Allowed.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, error) {
	d, err := l.AllowN(ctx, key, 1)
	return d.Allowed, err
}

// AllowN decides whether n units for key fit now (Redis TIME), and records
// them if they do, with the engine's rules: n == 0 is allowed and records
// nothing; n < 0 and n > Limit are refused with RetryAfter engine.Never.
//
// When Redis fails, the failure is counted and sent to the OnError hook, and
// the failure policy decides; the error is then nil, because the policy
// answered. AllowN returns an error only when ctx was already done before
// the call.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) {
	if err := ctx.Err(); err != nil {
		return engine.Decision{Limit: l.cfg.Limit}, err
	}
	if l.hyb != nil {
		return l.hybridAllow(ctx, key, n)
	}
	d, _, err := l.eval(ctx, key, n)
	if err != nil {
		return l.fail(key, n, err, true), nil
	}
	l.decisions.Add(1)
	return d, nil
}

// eval runs the script and returns its decision and the Redis time it used.
func (l *Limiter) eval(ctx context.Context, key string, n int64) (engine.Decision, time.Time, error) {
	keys := []string{l.Key(key)}
	args := make([]any, 0, 7)
	args = append(args, n)
	args = append(args, l.args...)
	args = append(args, "0")
	res, err := script.EvalSha(ctx, l.client, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Only an explicit NOSCRIPT: the script did not run, so nothing
		// was counted. EVAL loads it and runs it, once. A timeout is
		// never retried: the call may already have counted.
		l.noscript.Add(1)
		res, err = script.Eval(ctx, l.client, keys, args...).Result()
	}
	if err != nil {
		return engine.Decision{}, time.Time{}, err
	}
	return parse(res, l.cfg.Limit)
}

func parse(res any, limit int64) (engine.Decision, time.Time, error) {
	a, ok := res.([]any)
	if !ok || len(a) != 5 {
		return engine.Decision{}, time.Time{}, fmt.Errorf("redisstore: unexpected script reply %v", res)
	}
	var v [5]int64
	for i := range a {
		x, ok := a[i].(int64)
		if !ok {
			return engine.Decision{}, time.Time{}, fmt.Errorf("redisstore: unexpected script reply %v", res)
		}
		v[i] = x
	}
	d := engine.Decision{Allowed: v[0] == 1, Limit: limit, Remaining: v[1], RetryAfter: time.Duration(v[2])}
	if v[2] < 0 {
		d.RetryAfter = engine.Never
	}
	return d, time.Unix(v[3], v[4]*1000), nil
}

// fail applies the failure policy; counted says whether err is a new failure
// (a hybrid decision while degraded reuses the flush's).
func (l *Limiter) fail(key string, n int64, err error, counted bool) engine.Decision {
	l.fallbacks.Add(1)
	if counted {
		l.failures.Add(1)
	}
	if counted && l.opts.onError != nil {
		l.opts.onError(fmt.Errorf("redisstore: key %q: %w", key, err))
	}
	limit := l.cfg.Limit
	if n < 0 || n > limit {
		return engine.Decision{Limit: limit, RetryAfter: engine.Never}
	}
	switch l.opts.policy {
	case FailOpen:
		return engine.Decision{Allowed: true, Limit: limit, Remaining: max(0, limit-n)}
	case FallbackLocal:
		return l.local.AllowN(key, n)
	}
	if n == 0 {
		return engine.Decision{Allowed: true, Limit: limit}
	}
	return engine.Decision{Limit: limit, RetryAfter: time.Duration(l.width)}
}
