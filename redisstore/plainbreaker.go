package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// The plain limiter's circuit breaker: after a failed round trip, every
// decision is the failure policy's, answered at once, until a background
// probe shows that Redis can decide again. Without it, each decision during
// an outage pays go-redis's retries and backoff (100 ms and more with the
// default options) before the policy answers.
const (
	// DefaultBreakerMin and DefaultBreakerMax are the breaker's waits
	// before its first probe and between later ones (see WithBreaker).
	DefaultBreakerMin = 10 * time.Millisecond
	DefaultBreakerMax = 500 * time.Millisecond
	// probeTimeout is one probe's deadline. A server that does not run the
	// script within it is not fit to decide; go-redis enforces it only for
	// dials, retry backoff and, with ContextTimeoutEnabled, reads.
	probeTimeout = 500 * time.Millisecond
	// deadlineGrace: a caller's deadline that passes during its call opens
	// the breaker only when round trips have gone unanswered for this long
	// (see stalled). A server slower than a caller's deadline (a latency
	// spike, callers with budgets of a few ms) is not an outage while it
	// answers; a stalled one answers nobody.
	deadlineGrace = 100 * time.Millisecond
)

// WithBreaker sets the plain limiter's circuit breaker, on by default with
// DefaultBreakerMin and DefaultBreakerMax (10 ms, 500 ms). A round trip
// that fails opens it (see below for which failures do); while it is open,
// AllowN answers by the failure policy at once, with an error wrapping
// ErrUnavailable and the cause, makes no round trip and does not call the
// OnError hook. A background probe runs the script on a key of its own in
// the failed key's hash tag (so on the same Cluster node), adding one unit
// there: it proves that Redis can run the script and write, which a PING
// does not (a replica after a failover, a server out of memory). It runs
// minWait after the failure, then at doubling intervals up to maxWait; each
// failed probe counts in Stats().Failures and is passed to the OnError
// hook, and the first probe that succeeds closes the breaker. So decisions
// return to Redis within about maxWait (plus one probe) of the server's
// return.
//
// Want 1ms ≤ minWait ≤ maxWait ≤ 1 minute. WithBreaker(0, 0) turns the
// breaker off: every decision tries Redis. The hybrid mode has its own
// failure state (see WithHybrid), and New refuses WithBreaker with it.
//
// What opens it: a connection error, a timeout of the client's own, any
// error reply (LOADING, READONLY, BUSY, OOM, a script error, ...) except
// WRONGTYPE (another client's value at one key fails that key alone), and a
// deadline of the caller's that passed during the call when round trips
// have gone unanswered for 100 ms: the first one sent since the last reply
// is that old (the server answered nobody in that time; a server that
// answers, if more slowly than this caller's deadline, is not down). A
// caller's cancellation never opens it, unless the error itself shows
// Redis failing (an error reply, a refused connection, the client's own
// timeout). With a ClusterClient, a call given up before it was sent
// opens nothing (it says nothing about its own node).
//
// With a ClusterClient there is one breaker per master node (by the
// address that owns the key's slot, looked up per decision in the client's
// cached slot map): one node down leaves the others' keys to Redis, but
// a stalled node's round trips hold the limiter's two senders until the
// client gives them up, and calls for other nodes queue behind them
// meanwhile (give such a client a short ReadTimeout, or
// ContextTimeoutEnabled). With
// any other client (a Ring included) there is one breaker per Limiter.
func WithBreaker(minWait, maxWait time.Duration) Option {
	return func(o *options) error {
		if minWait == 0 && maxWait == 0 {
			o.brSet, o.brMin, o.brMax = true, 0, 0
			return nil
		}
		if minWait < time.Millisecond || maxWait < minWait || maxWait > time.Minute {
			return fmt.Errorf("redisstore: WithBreaker(%v, %v): want 1ms ≤ minWait ≤ maxWait ≤ 1m, or (0, 0) for no breaker", minWait, maxWait)
		}
		o.brSet, o.brMin, o.brMax = true, minWait, maxWait
		return nil
	}
}

// plainBreaker is one breaker of the plain mode, with the key its probe
// writes near: the Limiter's only one, or with a ClusterClient one per
// master node.
type plainBreaker struct {
	*breaker
	l   *Limiter
	key atomic.Pointer[string] // the user key whose failure last tripped it
}

func (l *Limiter) newPlainBreaker() *plainBreaker {
	pb := &plainBreaker{l: l}
	pb.breaker = newBreaker(pb.probe, l.opts.brMin, l.opts.brMax, l.opts.manual)
	pb.breaker.onClose = l.startCheck // the outage may have been a restart or a failover: another server
	return pb
}

// startBreaker sets up the plain mode's breaker (its goroutine starts with
// the first trip). With a ClusterClient, breakers are per master node and
// made at their node's first failure.
func (l *Limiter) startBreaker() {
	l.bg, l.bgCancel = context.WithCancel(context.Background())
	if cc, ok := l.client.(*redis.ClusterClient); ok {
		l.cluster = cc
		return
	}
	l.br = l.newPlainBreaker()
}

// breakerFor returns the breaker that guards key: the Limiter's one, or
// the one of the master node that owns key's slot (address "" when the
// ClusterClient cannot say), made if create and none exists yet. It
// returns nil when there is none, or after Close.
func (l *Limiter) breakerFor(ctx context.Context, key string, create bool) *plainBreaker {
	if l.cluster == nil {
		return l.br
	}
	if !create && l.nodeCount.Load() == 0 {
		return nil // no node has failed yet: no lookup
	}
	var addr string
	if c, err := l.cluster.MasterForKey(ctx, l.Key(key)); err == nil {
		addr = c.Options().Addr
	}
	if v, ok := l.nodes.Load(addr); ok {
		return v.(*plainBreaker)
	}
	if !create {
		return nil
	}
	l.nodeMu.Lock()
	defer l.nodeMu.Unlock()
	if l.closed.Load() {
		return nil // Close stops every breaker made before it, under nodeMu
	}
	v, loaded := l.nodes.LoadOrStore(addr, l.newPlainBreaker())
	if !loaded {
		l.nodeCount.Add(1)
	}
	return v.(*plainBreaker)
}

// stopBreakers turns the breakers off and waits for their probers (Close).
func (l *Limiter) stopBreakers() {
	l.nodeMu.Lock()
	l.closed.Store(true)
	l.nodeMu.Unlock()
	l.bgCancel()
	if l.br != nil {
		l.br.stop()
	}
	l.nodes.Range(func(_, v any) bool {
		v.(*plainBreaker).stop()
		return true
	})
}

// breakerErr is nil when a decision for key may go to Redis, else the
// error for a policy answer. After Close it is always nil: no prober would
// close a breaker.
func (l *Limiter) breakerErr(ctx context.Context, key string) error {
	if l.bg == nil || l.closed.Load() {
		return nil
	}
	if pb := l.breakerFor(ctx, key, false); pb != nil {
		return pb.err()
	}
	return nil
}

// since is the Limiter's monotonic clock, for the age of unanswered
// round trips.
func (l *Limiter) since() int64 { return int64(time.Since(l.born)) }

// sending records that a round trip is being sent: the first one after
// the last success starts the span of unanswered round trips (pending is
// since()+1 then; 0 while none is unanswered).
//
// It returns the span's start when this round trip started it, else 0
// (see notSent).
func (l *Limiter) sending() int64 {
	if l.bg == nil || l.pending.Load() != 0 {
		return 0
	}
	if t := l.since() + 1; l.pending.CompareAndSwap(0, t) {
		return t
	}
	return 0
}

// notSent ends the span of unanswered round trips that the round trip
// begun with span started, when that round trip ended on its context
// (go-redis gave it up waiting for a connection or a dial): it may never
// have reached Redis, so it says nothing of a stall. (Tiny deadlines after
// an idle spell failed so, and a span they left open made the next burst
// look stalled.)
func (l *Limiter) notSent(span int64) {
	if span != 0 {
		l.pending.CompareAndSwap(span, 0)
	}
}

// ctxOnly reports whether err is a context's error itself, as go-redis
// returns it when it gives up before the network (a read that times out
// is a net error instead).
func ctxOnly(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// answered records that a round trip got a reply (of any of its calls,
// whether or not its callers still wait for it): Redis answers.
func (l *Limiter) answered() {
	if l.bg != nil && l.pending.Load() != 0 {
		l.pending.Store(0)
	}
}

// stalled reports whether round trips have gone unanswered for
// deadlineGrace: sent since the last reply, the first of them that long
// ago. A server slower than a caller's deadline answers within it; an
// idle limiter has none unanswered; a stalled server answers nobody.
func (l *Limiter) stalled() bool {
	p := l.pending.Load()
	return p != 0 && l.since()+1-p >= int64(deadlineGrace)
}

// tripOn opens key's breaker, if there is one, after a decision's round
// trip failed with err (see WithBreaker for which failures do).
func (l *Limiter) tripOn(ctx context.Context, key string, err error) {
	if l.bg == nil || l.closed.Load() || keyError(err) {
		return
	}
	if errors.Is(err, errAbandoned) && l.cluster != nil {
		// Never sent: it waited behind round trips to some node, maybe
		// not key's. (With one breaker, the deadline rule below judges
		// it: round trips unanswered for deadlineGrace are a stall.)
		return
	}
	if cerr := ctxDone(ctx); cerr != nil && !provesDown(err) {
		ctxErr := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
		if errors.Is(cerr, context.Canceled) && ctxErr {
			return // the caller gave up: nothing is known about Redis
		}
		// A deadline (or a cancellation whose round trip then failed on
		// the client's own timeout, which opens it as always): only a
		// stall opens it, not a reply slower than this caller's budget.
		if errors.Is(cerr, context.DeadlineExceeded) && !l.stalled() {
			return
		}
	}
	pb := l.breakerFor(ctx, key, true)
	if pb == nil {
		return
	}
	pb.key.Store(&key)
	if pb.trip(fmt.Errorf("the breaker is open, no round trip made; it opened on key %q: %w", key, err)) {
		l.breakerOpens.Add(1)
	}
}

// provesDown reports whether err shows Redis failing whatever the caller's
// context: an error reply, or a refused connection. Other errors with the
// caller's context done may be the caller's doing.
func provesDown(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || errors.Is(err, syscall.ECONNREFUSED)
}

// probe is a plain breaker's probe: the script on the probe key of the
// key that last tripped it, within probeTimeout. Its failure is counted and
// reported.
func (pb *plainBreaker) probe(abort <-chan struct{}) error {
	select {
	case <-abort:
		return errAborted
	default:
	}
	l := pb.l
	var key string
	if p := pb.key.Load(); p != nil {
		key = *p
	}
	ctx, cancel := context.WithTimeout(l.bg, probeTimeout)
	defer cancel()
	l.sending()
	err := l.probeCall(ctx, key)
	if err == nil {
		l.answered()
		return nil
	}
	if l.bg.Err() != nil {
		return errAborted // Close: not Redis's failure
	}
	l.failures.Add(1)
	l.report(fmt.Errorf("redisstore: breaker probe: %w", err))
	return fmt.Errorf("the breaker is open, no round trip made; its last probe failed: %w", err)
}

// probeName returns the Redis key a probe writes to for user key k: the
// key's own name and ":probe", in its hash tag, so no user key's name.
func (l *Limiter) probeName(k string) string { return l.Key(k) + ":probe" }

// probeCall runs the script as a hybrid flush does with no batch key: add
// one unit, unchecked, to the probe key (which expires as any key does),
// so that the server must run the script and write. An explicit NOSCRIPT
// loads it (the script did not run).
func (l *Limiter) probeCall(ctx context.Context, key string) error {
	keys := []string{l.probeName(key)}
	args := make([]any, 0, 9)
	args = append(args, 1, l.cfg.Limit)
	args = append(args, l.args...)
	args = append(args, "1", 0, 0)
	res, err := script.EvalSha(ctx, l.client, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		l.noscript.Add(1)
		res, err = script.Eval(ctx, l.client, keys, args...).Result()
	}
	if err != nil {
		return err
	}
	_, _, err = parse(res, l.cfg.Limit)
	return err
}

// errBreakerHybrid is New's error for WithBreaker with WithHybrid.
var errBreakerHybrid = errors.New("redisstore: WithBreaker applies to the plain mode; the hybrid mode has its own failure state (see WithHybrid)")
