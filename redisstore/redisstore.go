// Package redisstore is ringlimit's limiter shared across processes on
// Redis: the engine's algorithms (SlidingWindow, SlidingWindowStrict,
// FixedWindow, and TokenBucket as GCRA in exact integers) and its
// Decision, decided atomically by one Lua script per request, with Redis
// TIME as the one time source. Replicas that share a Redis share each
// key's limit.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	l, err := redisstore.New(rdb, engine.Config{Limit: 100, Window: time.Minute})
//	...
//	defer l.Close()
//	d, err := l.AllowN(ctx, "tenant-7", 1) // err != nil: Redis did not decide
//
// The entry points:
//
//   - New builds a Limiter; AllowN and Allow decide. A *Limiter is an
//     httplimit and grpclimit ContextLimiter as it is.
//   - When Redis fails, the FailurePolicy answers (WithFailurePolicy,
//     WithFallbackLocal), with an error wrapping ErrUnavailable, and a
//     breaker (WithBreaker) answers at once while Redis stays down.
//   - Reserve holds units that Cancel gives back and Settle adjusts to the
//     actual cost; ChargeN records a cost known afterwards; ReserveN serves
//     httplimit's and grpclimit's WithInFlight and WithSettle.
//   - Reset forgets a key's count; Config.KeyLimit gives per-key limits,
//     asked on every decision.
//   - WithHybrid decides most requests in process and sends counts in
//     batches, for high QPS on few hot keys.
//   - Stats and WithOnError report what happened.
//
// Every call returns by its context's deadline, and a caller whose context
// ends first is never admitted. The script, the key's layout, the bounds,
// the outages and the hybrid mode's bound are in redisstore/README.md.
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
	multi     bool           // the client spreads keys over nodes (ClusterClient, Ring): breakers per node
	nodes     sync.Map       // string → *plainBreaker
	checkers  sync.Map       // string (a node's address) → *checker (client.go)
	dials     sync.WaitGroup // the checkers' dials in progress (checkdial.go)
	live      time.Duration  // liveBudget: the longest silence of a node that answers
	nodeCount atomic.Int32   // breakers in nodes
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
// validates it, and further (redisstore/README.md, "The script" and "The
// token bucket", gives each bound): no SlidingLog; a sub-window of whole
// microseconds; Window plus two sub-windows below 2^53 ns; with
// SlidingWindow, Limit × sub-window width (ns) below 2^53; with
// TokenBucket, a rate and Burst exact in Lua's doubles, and no WithHybrid.
// The fields only the in-process engine implements (MaxLogLimit, Clock,
// CoarseClock, Shards, MaxKeys, ExpectedKeys, DisableEviction, SweepInterval, the
// Audit fields) and PerKeyLimits alone are refused with
// an error naming the field; MaxKeyBytes is honoured (see AllowN).
//
// Config.KeyLimit is asked on every decision (the engine asks it once per
// key state), so a change of its answer (httplimit.Tiers.Swap) applies
// from the next decision, counts kept; it must be cheap and safe for
// concurrent use. 0 means Config.Limit; an answer out of range refuses
// that request with RetryAfter engine.Never. With TokenBucket it is the
// key's rate, and the bucket holds Config.Burst, or the answer when Burst
// is 0.
//
// A client that lets a round trip to a stalled server last forever
// (ReadTimeout −1 without ContextTimeoutEnabled, or −2) gets
// ErrUnboundedRoundTrip passed to the OnError hook, once.
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
// A plain limiter has nothing to flush: Close cancels a maxmemory-policy
// check in flight, turns the breaker off (every later decision tries
// Redis), stops the prober and the fallback engine's sweeper, ends the
// dials of the confirmations' connections (waiting for one whose Dialer
// ignores its context), and waits for the round trips in flight when it
// is called. On a stalled server a round
// trip lasts up to (1 + MaxRetries) × ReadTimeout plus go-redis's backoff,
// or, with ContextTimeoutEnabled, until its context's deadline (see
// ErrUnboundedRoundTrip; README, "Deadlines and batching").
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
// nothing. The error is nil exactly when the Decision is Redis's (or one
// made in process, below).
//
//   - A request that can never be admitted (n < 0, n above the key's
//     limit, a KeyLimit answer out of range) is refused at once, with a nil
//     error and no round trip: Reason() is ReasonNever, Remaining 0 (the
//     count was not read). A key longer than Config.MaxKeyBytes likewise,
//     with Limit 0 and Reason() ReasonKeyTooLong, nothing stored.
//   - When Redis is down it counts the failure in Stats().Failures,
//     passes it to the OnError hook, and returns the failure policy's
//     Decision with an error wrapping ErrUnavailable and the cause, never
//     a context's error (FailClosed: denied; FailOpen: admitted;
//     FallbackLocal: the local engine's); at once, without a round trip,
//     while the breaker is open (WithBreaker) or a hybrid limiter is in
//     its failure state.
//   - A round trip that got no answer while Redis answers others is no
//     outage: nothing admitted, an error wrapping ErrNoReply.
//   - A caller whose context ends before Redis answers is never admitted,
//     under any failure policy: a zero Decision with an error wrapping
//     ctx's error (not ErrUnavailable), counted CallerGone, not passed to
//     OnError. A reply that arrives with the cancel is used.
//
// AllowN returns by ctx's deadline, whatever the client's options; a call
// not yet sent when its caller leaves is never sent. Concurrent calls go
// to Redis together as one pipeline (README, "Deadlines and batching").
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
