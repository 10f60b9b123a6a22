package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The plain limiter's circuit breaker: once Redis is found down, every
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
)

// WithBreaker sets the plain limiter's circuit breaker, on by default with
// DefaultBreakerMin and DefaultBreakerMax (10 ms, 500 ms). While it is
// open, AllowN answers by the failure policy at once, with an error
// wrapping ErrUnavailable and the cause, makes no round trip and does not
// call the OnError hook. A background probe runs the script (a PING would
// not do: a replica after a failover, a server out of memory) minWait
// after the opening, then at doubling intervals up to maxWait; each failed
// probe counts in Stats().Failures and goes to OnError, and the first that
// succeeds closes the breaker.
//
// It opens on Redis's failure, never on the process's own delay: at once
// on an error reply (except WRONGTYPE, which fails its key alone) or a
// refused connection; after a round trip that got no answer, only once a
// confirmation on a connection of the limiter's own finds the node silent
// for the client's ReadTimeout (at least 250 ms) of the process's own
// time. Until then decisions keep going to Redis; a caller whose round
// trip failed waits for the verdict, and gets ErrNoReply if Redis answers.
// README, "The breaker", and docs/design.md §10 have what counts as
// silence and why.
//
// Want 1ms ≤ minWait ≤ maxWait ≤ 1 minute. WithBreaker(0, 0) turns it
// off: every decision tries Redis, and failures are still judged so. With
// a ClusterClient there is one breaker per master node, with a Ring one
// per shard; with any other client, one per Limiter. New refuses
// WithBreaker with WithHybrid, which has its own failure state.
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
// master node (with a Ring, one per shard).
type plainBreaker struct {
	*breaker
	l    *Limiter
	addr string                 // the node's address ("": the one server)
	node *redis.Client          // the node's client, for its checker (nil: unknown)
	key  atomic.Pointer[string] // the user key whose failure last tripped it, or was last suspected
}

func (l *Limiter) newPlainBreaker(addr string, node *redis.Client) *plainBreaker {
	pb := &plainBreaker{l: l, addr: addr, node: node}
	b := newBreaker(pb.probe, l.opts.brMin, l.opts.brMax, l.opts.manual)
	b.onClose = l.startCheck // the outage may have been a restart or a failover: another server
	b.opens = &l.breakerOpens
	b.onOpen = func() {
		if l.hyb != nil {
			l.hyb.openedNode(addr)
		}
	}
	b.off = l.opts.brMax == 0
	b.bg = l.bg
	b.budget = l.live
	b.check = func(ctx context.Context) error { return l.check(ctx, addr, node, pb.lastKey()) }
	l.confirming(b, addr, node)
	b.wrap = func(cause error) error {
		return fmt.Errorf("the breaker is open, no round trip made; it opened on key %q: %w", pb.lastKey(), cause)
	}
	pb.breaker = b
	return pb
}

func (pb *plainBreaker) lastKey() string {
	if p := pb.key.Load(); p != nil {
		return *p
	}
	return ""
}

// startBreaker sets up the plain mode's breaker (its goroutines start with
// the first failure); WithBreaker(0, 0) makes it one that confirms outages
// but never opens. With a ClusterClient or a Ring, breakers are per node
// (master, shard) and made at their node's first failure.
func (l *Limiter) startBreaker() {
	if l.multi {
		return
	}
	l.br = l.newPlainBreaker(l.node(context.Background(), ""))
}

// breakerFor returns the breaker that guards key: the Limiter's one, or
// the one of the node that serves key (a master that owns its slot, a
// Ring's shard; address "" when the client cannot say), made if create
// and none exists yet. It returns nil when there is none, or after Close.
func (l *Limiter) breakerFor(ctx context.Context, key string, create bool) *plainBreaker {
	if !l.multi {
		return l.br
	}
	if !create && l.nodeCount.Load() == 0 {
		return nil // no node has failed yet: no lookup
	}
	addr, node := l.node(ctx, key)
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
	v, loaded := l.nodes.LoadOrStore(addr, l.newPlainBreaker(addr, node))
	if !loaded {
		l.nodeCount.Add(1)
	}
	return v.(*plainBreaker)
}

// stopBreakers turns the breakers off and waits for their goroutines
// (Close).
func (l *Limiter) stopBreakers() {
	l.nodeMu.Lock()
	l.closed.Store(true)
	l.nodeMu.Unlock()
	if l.br != nil {
		l.br.stop()
	}
	l.nodes.Range(func(_, v any) bool {
		v.(*plainBreaker).stop()
		return true
	})
}

// breakerErr is nil when a decision for key may go to Redis, else the
// error for a policy answer. After Close it is always nil: no prober
// would close a breaker.
func (l *Limiter) breakerErr(ctx context.Context, key string) error {
	if l.hyb != nil && !l.multi || l.closed.Load() {
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
// the last reply starts the span of unanswered round trips (pending is
// since()+1 then; 0 while none is unanswered). A round trip that ended on
// its context (go-redis gave it up waiting for a connection or a dial)
// may never have been sent: it leaves the span open all the same, since
// a span only raises a suspicion, which a confirmation then judges.
func (l *Limiter) sending() {
	if l.pending.Load() == 0 {
		l.pending.CompareAndSwap(0, l.since()+1)
	}
}

// ctxOnly reports whether err is a context's error itself, as go-redis
// returns it when it gives up before the network (a read that times out
// is a net error instead).
func ctxOnly(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// answered records that a round trip got a reply (of any of its calls,
// whether or not its callers still wait for it): Redis answers. It ends a
// confirmation of the Limiter's one breaker (see liveness.go).
func (l *Limiter) answered() {
	l.replies.Add(1)
	if l.pending.Load() != 0 {
		l.pending.Store(0)
	}
}

// stalled reports whether round trips have gone unanswered for
// suspectAfter: sent since the last reply, the first of them that long
// ago. A server slower than a caller's deadline answers within it; an
// idle limiter has none unanswered; a stalled server answers nobody.
func (l *Limiter) stalled() bool {
	p := l.pending.Load()
	return p != 0 && l.since()+1-p >= int64(suspectAfter)
}

// judge judges a decision's failed round trip for key's breaker (see
// liveness.go and WithBreaker) and returns the verdict a caller still
// waiting should wait for before it answers: final already for a proof
// (the breaker opened), pending while a confirmation runs, nil when the
// failure says nothing of Redis (a call never sent, the caller's own
// cancellation, WRONGTYPE, or no breaker: after Close).
func (l *Limiter) judge(ctx context.Context, key string, err error) *verdict {
	if l.closed.Load() {
		return nil
	}
	ev := classify(err)
	if errors.Is(err, errAbandoned) {
		// Never sent, so no evidence itself; but its caller waited
		// behind the round trips that were sent, and its deadline
		// judges their silence as any caller's does (below): a
		// suspicion at most, which a confirmation on key's node (with a
		// ClusterClient, maybe not the silent one) then judges.
		ev = suspicion
	}
	if cerr := ctxDone(ctx); ev == suspicion && cerr != nil {
		// The caller's context ended. A cancellation on which go-redis
		// gave up (maybe before the network) says nothing; a deadline
		// is a suspicion only if round trips have gone unanswered for
		// suspectAfter (a reply slower than this caller's budget is
		// not one). A timeout of the client's own is one as always.
		if errors.Is(cerr, context.Canceled) && ctxOnly(err) || errors.Is(cerr, context.DeadlineExceeded) && !l.stalled() {
			ev = noEvidence
		}
	}
	if ev == noEvidence {
		return nil
	}
	var b *breaker
	if l.hyb != nil && !l.multi {
		b = l.hyb.br
	} else { // per node, in both modes
		pb := l.breakerFor(ctx, key, true)
		if pb == nil {
			return nil
		}
		pb.key.Store(&key)
		b = pb.breaker
	}
	if ev == proof {
		b.trip(err)
		return decided(b.err())
	}
	return b.suspect()
}

// probe is a plain breaker's probe: the script on the probe key of the
// key that last tripped it, within max(probeTimeout, the budget). Its failure is counted and
// reported.
func (pb *plainBreaker) probe(abort <-chan struct{}) error {
	select {
	case <-abort:
		return errAborted
	default:
	}
	l := pb.l
	ctx, cancel := context.WithTimeout(l.bg, max(probeTimeout, l.live))
	defer cancel()
	// Through the client, as decisions go: a probe that succeeds there has
	// also cleared the pool of connections that fail (to a demoted node
	// after a failover, say). Only if it got no connection (the
	// application holds the pool: no evidence) does the checker answer.
	err := l.probeCall(ctx, l.client, pb.lastKey())
	if errors.Is(err, redis.ErrPoolTimeout) {
		err = l.check(ctx, pb.addr, pb.node, pb.lastKey())
	}
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

// check is one round trip that shows whether Redis can decide: the probe
// script on key's probe key (see probeCall), on the checker of the node
// at addr (client.go), not in the client's pool (through l.client only
// when the client's type has no checker), unless the checker cannot keep
// a connection. A reply counts as any reply does (answered).
func (l *Limiter) check(ctx context.Context, addr string, node *redis.Client, key string) error {
	var c redis.Scripter = l.client
	ck := l.checkerFor(addr, node)
	if ck != nil {
		c = ck.c
	} else if l.closed.Load() {
		return errAborted
	}
	err := l.probeCall(ctx, c, key)
	if lostConn(err) && ctx.Err() == nil {
		// A pooled connection that the server closed (killed, or the
		// server restarted): once more, on a new one.
		err = l.probeCall(ctx, c, key)
	}
	if ck != nil && lostConn(err) && ctx.Err() == nil {
		// The new one was lost too: Redis at maxclients resets every
		// connection it cannot take, or connections are killed as they
		// are made. The node's pool may hold connections Redis still
		// answers on, and with no other round trip (the traffic
		// stopped) nothing else would show it: once through the pool.
		// If the application holds the pool, this waits there as a
		// decision would, and the confirmation's ticks judge meanwhile.
		err = l.probeCall(ctx, node, key)
	}
	if err == nil {
		l.answered()
	}
	return err
}

// nodeReplies returns the count of replies that show the node answers:
// with a client of one server, every round trip's (answered); nil with a
// ClusterClient or a Ring, where other nodes' replies say nothing of it.
func (l *Limiter) nodeReplies() func() uint64 {
	if l.multi {
		return nil
	}
	return l.replies.Load
}

// confirming sets what b's confirmations of the node at addr (node: its
// client, nil when unknown) watch, and how their verdict of an outage is
// counted: in Failures, and passed to the OnError hook, once per
// confirmation (its callers may all have gone: the outage is counted all
// the same).
func (l *Limiter) confirming(b *breaker, addr string, node *redis.Client) {
	b.replies = l.nodeReplies()
	if node != nil {
		b.dialing = func() int64 {
			if v, ok := l.checkers.Load(addr); ok {
				return v.(*checker).dialing.Load()
			}
			return 0
		}
	}
	b.onDown = func(cause error) {
		l.failures.Add(1)
		l.report(fmt.Errorf("redisstore: confirmation: %w", cause))
	}
}

// probeName returns the Redis key a probe writes to for user key k: the
// key's own name and ":probe", in its hash tag, so no user key's name.
func (l *Limiter) probeName(k string) string { return l.Key(k) + ":probe" }

// probeCall runs the script as a hybrid flush does with no batch key: add
// one unit, unchecked, to the probe key (which expires as any key does),
// so that the server must run the script and write. An explicit NOSCRIPT
// loads it (the script did not run).
func (l *Limiter) probeCall(ctx context.Context, c redis.Scripter, key string) error {
	keys := []string{l.probeName(key)}
	args := make([]any, 0, 9)
	args = append(args, 1, l.cfg.Limit)
	args = append(args, l.args...)
	args = append(args, "1", 0, 0)
	res, err := script.EvalSha(ctx, c, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		l.noscript.Add(1)
		res, err = script.Eval(ctx, c, keys, args...).Result()
	}
	if err != nil {
		return err
	}
	_, _, err = parse(res, l.cfg.Limit)
	return err
}

// errBreakerHybrid is New's error for WithBreaker with WithHybrid.
var errBreakerHybrid = errors.New("redisstore: WithBreaker applies to the plain mode; the hybrid mode has its own failure state (see WithHybrid)")
