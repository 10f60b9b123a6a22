// Package redisstore is ringlimit's sliding window shared across processes
// on Redis: the engine's algorithms (SlidingWindow, SlidingWindowStrict,
// FixedWindow, and TokenBucket as GCRA in exact integers) and its
// Decision, decided atomically by one Lua script per request, with Redis
// TIME as the one time source.
//
// Every request runs one script (EVALSHA, with EVAL on an explicit NOSCRIPT)
// that reads the key's state (its N+1 sub-window counts, packed in one
// string), decides with the engine's exact integer comparison, and adds n
// if it fits, all in one atomic step. The key's name carries the escaped
// user key in one hash tag, so a request touches one Cluster slot, and the
// window's geometry after it, so limiters of different geometries never
// share counters (see Limiter.Key). Concurrent calls share round trips as
// pipelines, and every call returns by its context's deadline.
//
// Reserve holds admitted units that Cancel gives back and Settle adjusts
// to the work's actual cost, and ChargeN records a cost known only
// afterwards, each one script call on the key's sub-window; with ReserveN,
// a Limiter serves httplimit's and grpclimit's WithInFlight and
// WithSettle.
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/callergone"
)

// MaxExact is 2^53: every integer the script computes must stay below it,
// because Lua's numbers are doubles.
const MaxExact = int64(1) << 53

// Limiter is a rate limiter whose state lives in Redis. It is safe for
// concurrent use.
type Limiter struct {
	client   redis.UniversalClient
	cfg      engine.Config
	norm     engine.Config // cfg with engine.New's defaults, for Config
	opts     options
	width    int64 // sub-window width, ns
	span     int
	weighted bool
	maxLimit int64  // the largest limit a key may have: MaxLimit, or the weighted exactness bound
	geo      string // the geometry suffix of every Redis key (see Key)
	args     []any  // w µs, span, weighted, ttl ms (after n and limit; see luaSource)
	local    *engine.Engine
	hyb      *hybrid
	batch    *batcher

	tb *tokenBucket // a TokenBucket's rate and burst (tokenbucket.go); nil for the windows

	// ctxTimeouts: the client enforces context deadlines on its reads
	// (ContextTimeoutEnabled, ReadTimeout not −2), so a caller with a deadline may make its
	// own round trip.
	ctxTimeouts bool

	closeOnce sync.Once
	closeErr  error

	// The plain mode's breakers (plainbreaker.go): br is the one breaker,
	// or with a ClusterClient nodes holds one per master address, made
	// under nodeMu. The hybrid mode's is hyb.br, or with a ClusterClient
	// or a Ring the nodes' breakers, as in the plain mode.
	br        *plainBreaker
	multi     bool          // the client spreads keys over nodes (ClusterClient, Ring): breakers per node
	nodes     sync.Map      // string → *plainBreaker
	checkers  sync.Map      // string (a node's address) → *checker (client.go)
	live      time.Duration // liveBudget: the longest silence of a node that answers
	nodeCount atomic.Int32  // breakers in nodes
	nodeMu    sync.Mutex
	bg        context.Context // a probe's or a confirmation's parent, cancelled by Close
	bgCancel  context.CancelFunc
	born      time.Time     // the origin of since()
	pending   atomic.Int64  // since()+1 at the first round trip sent after the last reply; 0: none (see stalled)
	replies   atomic.Uint64 // round trips that got a reply (see answered)
	closed    atomic.Bool   // Close was called: the breakers are off

	evict evictionCheck // maxmemory-policy (eviction.go)

	redisDecisions, localDecisions, fallbacks, failures, noscript atomic.Uint64
	callerGone, noReply                                           atomic.Uint64
	flushes, slowFlushes, lostUnits, breakerOpens                 atomic.Uint64
	cancelErrors, chargeErrors                                    atomic.Uint64 // reserve.go
}

var script = redis.NewScript(luaSource)

// New returns a Limiter for cfg on client. cfg is validated as engine.New
// validates it, and further: Algorithm must not be SlidingLog, the
// sub-window width must be a whole number of microseconds (Redis TIME's
// resolution), Window plus two sub-windows must be below 2^53 ns (about
// 104 days), and with SlidingWindow Limit × sub-window width (ns) must be
// below 2^53 (so the weighted comparison is exact in Lua's doubles; e.g.
// Limit < 9,007,199 at a 1 s sub-window). With TokenBucket, Burst ×
// Window/Limit must be exact in Lua's doubles (Burst·p + p + 2q ≤ 2^53
// where Window/Limit = p/q µs in lowest terms) and fill in under 2^50 µs;
// a Decision's Limit is the bucket's capacity, and WithHybrid is refused
// (redisstore/README.md, "The token bucket"). The fields that only the
// in-process engine implements (MaxLogLimit, Clock, CoarseClock, Shards,
// MaxKeys, LookupCache, DisableEviction, SweepInterval and the Audit
// fields) are refused with an error naming the field: time is Redis TIME
// and keys expire by TTL. Config.MaxKeyBytes is honoured as the engine
// honours it (see AllowN).
//
// Config.KeyLimit gives each key its own limit, and unlike the engine's
// (called when a key's state is created) it is called on every decision,
// so a change of its answer (httplimit.Policies.Swap, for example) applies
// from the next decision, with the counts kept. It must be cheap and safe
// for concurrent use. A result of 0 means Config.Limit; a result outside
// 1 … MaxLimit, or, with SlidingWindow, above the Limit × width bound
// above (with TokenBucket, a rate outside the exactness bound), refuses
// that request with RetryAfter engine.Never, as the engine does. With
// TokenBucket the answer is the key's rate, Limit per Window; its bucket
// holds Config.Burst, or the answer when Burst is 0. Config.PerKeyLimits
// alone (the engine's SetLimit) is refused: redisstore has no SetLimit;
// use KeyLimit. With WithHybrid, each key's local allowance is sized
// against its own limit, and a change of it makes the key's next decision
// exact.
//
// If the client lets a round trip to a stalled server last forever (a
// *redis.Client or *redis.ClusterClient given ReadTimeout −1 without
// ContextTimeoutEnabled, or ReadTimeout −2, with which go-redis sets no
// read deadline even from the context), New passes
// ErrUnboundedRoundTrip to the OnError hook, once: every decision still returns by its caller's deadline, but
// the stalled round trip keeps one of the limiter's two senders and its
// connection until the server answers, and Close waits for it.
func New(client redis.UniversalClient, cfg engine.Config, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	o := options{prefix: "ringlimit:", brMin: DefaultBreakerMin, brMax: DefaultBreakerMax}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.hybrid && o.brSet {
		return nil, errBreakerHybrid
	}
	if err := engineOnly(cfg); err != nil {
		return nil, err
	}
	if cfg.Algorithm == engine.SlidingLog {
		return nil, errors.New("redisstore: Config.Algorithm = SlidingLog is not supported; use SlidingWindowStrict for a hard bound (see the README's table of what each store supports)")
	}
	if cfg.PerKeyLimits && cfg.KeyLimit == nil {
		return nil, errors.New("redisstore: Config.PerKeyLimits without Config.KeyLimit: redisstore has no SetLimit; give per-key limits with Config.KeyLimit, which is asked on every decision")
	}
	if cfg.Algorithm == engine.TokenBucket && o.hybrid {
		return nil, errTokenBucketHybrid
	}
	norm, err := validate(cfg) // as engine.New validates it, once
	if err != nil {
		return nil, err
	}

	l := &Limiter{client: client, cfg: cfg, norm: norm, opts: o, weighted: cfg.Algorithm == engine.SlidingWindow, born: time.Now()}
	l.evict.ctx, l.evict.cancel = context.WithCancel(context.Background())
	l.bg, l.bgCancel = context.WithCancel(context.Background())
	if cfg.Algorithm == engine.TokenBucket {
		err = l.initTokenBucket() // tokenbucket.go
	} else {
		err = l.initWindows()
	}
	if err != nil {
		return nil, err
	}
	l.batch = &batcher{l: l, linger: DefaultLinger}
	if o.lingerSet {
		l.batch.linger = o.linger
	}
	l.ctxTimeouts = contextTimeouts(client)
	l.multi, l.live = multiNode(client), liveBudget(client)
	if o.policy == FallbackLocal {
		lc := cfg
		lc.Limit = max(1, int64(math.Floor(o.share*float64(cfg.Limit))))
		if cfg.Burst != 0 {
			lc.Burst = max(1, int64(math.Floor(o.share*float64(cfg.Burst))))
		}
		if kl := cfg.KeyLimit; kl != nil {
			lc.KeyLimit = func(key string) int64 {
				v := kl(key)
				if v < 1 || v > engine.MaxLimit {
					return v // 0: the share of Config.Limit; else refused, as by the limiter
				}
				return max(1, int64(math.Floor(o.share*float64(v))))
			}
		}
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
	} else {
		l.startBreaker()
	}
	if unboundedReads(client) {
		l.report(ErrUnboundedRoundTrip)
	}
	l.startCheck()
	return l, nil
}

// initWindows sets up the sliding and fixed windows' geometry: the
// sub-window width, N, the key suffix and the script's arguments.
func (l *Limiter) initWindows() error {
	n := l.cfg.SubWindows
	if n == 0 {
		n = engine.DefaultSubWindows
	}
	if l.cfg.Algorithm == engine.FixedWindow {
		l.width, l.span = int64(l.cfg.Window), 0
	} else {
		l.width, l.span = int64(l.cfg.Window)/int64(n), n
	}
	if err := l.checkBounds(); err != nil {
		return err
	}
	l.maxLimit = engine.MaxLimit
	if l.weighted {
		l.maxLimit = min(l.maxLimit, (MaxExact-1)/l.width)
	}
	l.geo = fmt.Sprintf(":w%dn%d", l.width/1000, l.span)
	ttl := (int64(l.cfg.Window) + l.width + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	w := "0"
	if l.weighted {
		w = "1"
	}
	l.args = []any{l.width / 1000, l.span, w, ttl}
	return nil
}

func (l *Limiter) checkBounds() error {
	if l.width%1000 != 0 {
		return fmt.Errorf("redisstore: the sub-window width %v is not a whole number of microseconds (Redis TIME's resolution): choose Window and SubWindows so that Window/SubWindows is a whole number of µs", time.Duration(l.width))
	}
	if int64(l.cfg.Window) >= MaxExact-2*l.width {
		return fmt.Errorf("redisstore: Config.Window = %v: Window plus two sub-windows must be below 2^53 ns (about 104 days) for the script's exact arithmetic", l.cfg.Window)
	}
	if l.weighted && l.cfg.Limit > (MaxExact-1)/l.width {
		return fmt.Errorf("redisstore: Config.Limit = %d with a %v sub-window: SlidingWindow needs Limit × sub-window width (ns) < 2^53 for an exact comparison in Lua; want Limit ≤ %d, or a shorter sub-window, or SlidingWindowStrict", l.cfg.Limit, time.Duration(l.width), (MaxExact-1)/l.width)
	}
	return nil
}

// Close releases what the Limiter started; it does not close the client.
// Decisions keep working after Close (see below). Close is idempotent:
// later and concurrent calls wait for the first and return its result.
//
// Close first cancels a maxmemory-policy check in flight (see
// ErrEvictionPolicy) and waits for it (its round trip is bounded as a
// decision's, below).
//
// A plain limiter has nothing to flush: Close turns its breaker off (every
// later decision tries Redis), stops its prober and waits for it, stops the
// fallback engine's sweeper (that engine still decides after Close, without
// reclaiming idle keys), and waits for the round trips in flight when it
// is called to come back (not for those that decisions after it start). A
// round trip (a decision's or a probe's) on a stalled server is
// bounded by the client's ReadTimeout (5 s by default in go-redis v9) once
// per attempt, and go-redis retries a timed-out command up to MaxRetries
// times (3 by default): so by (1 + MaxRetries) × ReadTimeout, plus the
// retries' backoff. With ContextTimeoutEnabled (and a ReadTimeout other
// than −2) it is bounded by its context's deadline instead; see
// ErrUnboundedRoundTrip.
//
// A hybrid limiter, from the moment Close is called, decides no more
// locally: every later decision is exact, one script call as in the plain
// mode (with the failure policy, and ErrUnavailable, if Redis fails), and
// counts this replica's units not yet recorded. Close then stops the
// flusher and the prober, and makes a last flush of every unit admitted
// before it (batches that were not confirmed are sent again; the sequence
// numbers make that safe). It returns when that flush has come back and
// every goroutine the Limiter started has ended: the last flush's own time
// (one round trip per 1,000 keys), plus at most about two flush deadlines
// (max(10 × interval, 500ms) each), plus, when a round trip was given up at
// its deadline, the time go-redis takes to give it up (its ReadTimeout, or
// the deadline with ContextTimeoutEnabled; with neither, a stalled server
// can hold Close indefinitely). If the last flush fails, Close returns an
// error wrapping ErrUnavailable that says how many units were not
// recorded; they are also in Stats().LostUnits.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.stopChecks()
		l.bgCancel()
		l.stopBreakers()
		if l.hyb != nil {
			l.closeErr = l.hyb.close()
		}
		l.closeCheckers()
		if l.local != nil {
			_ = l.local.Close()
		}
		l.batch.waitInFlight()
	})
	return l.closeErr
}

// Config returns the configuration the Limiter decides with: the Config
// given to New, with the defaults engine.New fills in (SubWindows, for
// one). The adapters read it as they read an *engine.Engine's: httplimit
// and grpclimit take the window (w=) and the algorithm, for the bound t=
// of an admitted response, from it. The engine-only fields, which New
// refuses (see New), are zero.
func (l *Limiter) Config() engine.Config { return l.norm }

// Allow is AllowN(ctx, key, 1).Allowed.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, error) {
	d, err := l.AllowN(ctx, key, 1)
	return d.Allowed, err
}

// AllowN decides whether n units for key fit now (Redis TIME), and records
// them if they do, with the engine's rules: n == 0 is allowed and records
// nothing. The error is nil exactly when the Decision is a real one.
//
// A key longer than Config.MaxKeyBytes (engine.DefaultMaxKeyBytes, 4 KiB,
// when 0) is refused at once, as the engine refuses it: no round trip,
// nothing stored in Redis, KeyLimit not asked, a nil error, and the
// Decision {Allowed: false, Limit: 0, Remaining: 0, RetryAfter:
// engine.Never}, whose Reason() is engine.ReasonKeyTooLong. It counts in
// no Stats field. So no caller can grow Redis's memory with long keys.
//
// A request that can never be admitted is refused at once, without a round
// trip and with a nil error: n < 0, n above the key's limit, or a KeyLimit
// result out of range (see New). Its Decision is {Allowed: false, Limit:
// the key's limit, Remaining: 0, RetryAfter: engine.Never}: Reason() is
// ReasonNever, as from the engine, but Remaining is 0 because the key's
// count was not read (the engine reports the key's real remaining).
//
// When Redis is down (see Policy), the failure is counted in
// Stats().Failures and passed to the OnError hook, and AllowN returns the
// failure policy's Decision with a non-nil error that wraps ErrUnavailable
// and the cause (never a context's error): test it with errors.Is(err,
// ErrUnavailable), and treat the Decision as the policy's (FailClosed:
// denied; FailOpen: admitted; FallbackLocal: the local engine's). While
// the breaker is open (see WithBreaker, on by default), and while a hybrid
// limiter is in its failure state, AllowN answers the same way at once,
// without a round trip. A round trip that got no answer while Redis
// answers others (the process was short of CPU, a connection was killed)
// is no outage: the error wraps ErrNoReply, and nothing is admitted.
//
// A caller whose context ends before Redis answers is never admitted,
// under any policy: nobody waits for the answer, and a policy that
// admitted it (FailOpen, FallbackLocal) would let a client buy admissions
// with its own cancels or short deadlines. AllowN returns a zero Decision
// (Allowed false, Limit set) with an error that wraps ctx's error
// (context.Canceled or context.DeadlineExceeded) and not ErrUnavailable,
// counted in Stats().CallerGone, not in Failures, and not passed to the
// OnError hook. That holds whichever way the call ended: ctx done before
// the call (nothing is asked), the call given up in the queue or in
// flight, go-redis returning ctx's error, or the client's own timeout
// after ctx ended. If Redis's reply and the end of ctx come together, the
// reply is used: it is the truth, and counted. The breaker still judges
// such a failed round trip as described at WithBreaker (a stall seen
// through callers' deadlines raises a suspicion).
//
// AllowN returns by ctx's deadline (plus the scheduling delay), whatever
// the client's options: when ctx has a deadline and the client does not
// enforce it (no ContextTimeoutEnabled), the round trip runs on one of the
// limiter's senders, and a caller whose context ends first returns then,
// as above. If its request had not been sent yet, it is never sent and
// Redis counts nothing for it; if it had, Redis may count it (the error
// says which). A caller without a deadline makes its own round trip when a
// sender's slot is free; a cancellation then returns with the round trip.
// Calls made while the senders are busy go to Redis together, as one
// pipeline; a lone call is sent at once.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) {
	if len(key) > l.norm.MaxKeyBytes {
		return engine.Decision{RetryAfter: engine.Never}, nil // ReasonKeyTooLong, as from the engine
	}
	rate, ok := l.limitOf(key)
	limit := l.capOf(rate) // the Decision's Limit (a TokenBucket's: its capacity)
	if err := ctxDone(ctx); err != nil {
		return l.gone(key, limit, err, nil)
	}
	if !ok || n < 0 || n > limit {
		return engine.Decision{Limit: limit, RetryAfter: engine.Never}, nil
	}
	if l.hyb != nil {
		return l.hybridAllow(ctx, key, n, limit)
	}
	if err := l.breakerErr(ctx, key); err != nil {
		l.fallbacks.Add(1)
		return l.policy(key, n, limit), err
	}
	d, _, err := l.batch.do(ctx, key, n, rate, 0)
	if err != nil {
		var held *heldError
		if errors.As(err, &held) {
			if cerr := ctxDone(ctx); cerr != nil {
				return l.gone(key, limit, cerr, nil) // the hold and the caller's end came together
			}
			l.fallbacks.Add(1)
			return l.policy(key, n, limit), held.err
		}
		return l.fail(ctx, key, n, limit, err)
	}
	l.redisDecisions.Add(1)
	l.answeredDecision()
	return d, nil
}

// limitOf returns key's limit and whether it is usable: Config.Limit, or
// KeyLimit's answer (0 meaning Config.Limit) if it is in 1 … l.maxLimit.
// An unusable answer is returned as it is, for the refusal's Decision.
func (l *Limiter) limitOf(key string) (int64, bool) {
	if l.cfg.KeyLimit == nil {
		return l.cfg.Limit, true
	}
	v := l.cfg.KeyLimit(key)
	if v == 0 {
		return l.cfg.Limit, true
	}
	return v, v >= 1 && v <= l.maxLimit && (l.tb == nil || l.tb.exact(v))
}

// ctxDone is the judgement of a caller who has gone (callergone.Err):
// ctx.Err(), and DeadlineExceeded once the deadline has passed even if the
// context's timer has not fired yet (ctx.Err() stays nil until it has).
// httplimit and grpclimit make the same one, so that a call redisstore
// counts as CallerGone they count as Canceled, never as an error.
func ctxDone(ctx context.Context) error { return callergone.Err(ctx) }
