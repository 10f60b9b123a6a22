package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// maxSenders is how many round trips a limiter keeps in flight at once.
// Two keep the server busy while one sender reads its replies and the
// next batch forms; more would shrink the batches without adding server
// time, which is what bounds throughput (one Redis thread).
const maxSenders = 2

// maxBatch caps one pipeline, so that a burst of callers is several round
// trips rather than one long one that delays them all.
const maxBatch = 256

// The states of a call: a caller whose context ends first takes it from
// queued to abandoned, and a sender takes it from queued to sent before it
// puts it in a pipeline. Exactly one of the two CASes succeeds, so an
// abandoned call is never sent, and Redis counts nothing for it.
const (
	queued int32 = iota
	sent
	abandoned
)

// call is one decision on its way to Redis.
type call struct {
	key               string
	n, limit, reserve int64
	deadline          time.Time // zero: none
	state             atomic.Int32
	done              chan result // buffered: a sender never waits for an abandoned caller
}

type result struct {
	d   engine.Decision
	at  time.Time
	err error
}

// batcher sends decisions to Redis, at most maxSenders round trips at a
// time. A caller that has no deadline to keep (its context has none: it
// never ends, or only by cancellation, as an HTTP request's) or can keep
// its own (the client enforces context deadlines) and finds a sender's
// slot free makes its own round trip, one EVALSHA. Any other caller queues its
// call and waits on its own channel and on its context, so that it returns
// by its deadline whatever the client does; if a slot is free it starts a
// sender goroutine. A sender takes every queued call (up to maxBatch),
// sends them as one round trip (a lone call as one EVALSHA, several as one
// pipeline), hands each reply to its own call by index, and ends when the
// queue is empty. A lone caller thus waits for nothing but its own round
// trip, and callers that arrive while both slots are busy share the next
// one.
type batcher struct {
	l         *Limiter
	mu        sync.Mutex // guards the fields below
	queue     []*call
	senders   int             // senders running
	rounds    atomic.Uint64   // round trips sent; tests read it
	piped     atomic.Uint64   // of them, pipelines of more than one call
	gathers   atomic.Uint64   // times a sender gathered (linger.go); tests read it
	idle      []chan struct{} // closed when senders drops to 0 (tests wait on one)
	linger    time.Duration   // WithLinger: how long a sender gathers (linger.go); 0: never
	gathering bool            // a sender is gathering: callers queue for it rather than go alone
	// inflight: the send time (since()+1; 0: free) of each round trip in
	// flight, one per sender slot (see begin).
	inflight [maxSenders]atomic.Int64
}

// judgedError is a failed round trip's error once the sender has judged it
// for the breaker (judge), before the next round trip could start, so
// that fail does not judge it again; v is the verdict to wait for (nil:
// none).
type judgedError struct {
	err error
	v   *verdict
}

func (j *judgedError) Error() string { return j.err.Error() }
func (j *judgedError) Unwrap() error { return j.err }

// mayHaveCounted marks the error of a round trip given up because its
// context ended (the caller's, or a batch's latest deadline; ctxDone's
// judgement) with errNotAnswered: the call may have reached Redis and been
// counted. An error reply is left alone: Redis answered.
func mayHaveCounted(ctx context.Context, err error) error {
	var reply redis.Error
	if ctxDone(ctx) == nil || errors.Is(err, errNotAnswered) || errors.As(err, &reply) {
		return err
	}
	return fmt.Errorf("%w: %w", errNotAnswered, err)
}

// heldError is a queued call's result when the breaker opened before a
// sender took it: the call was never sent, and err is the breaker's error
// for a policy answer (it wraps ErrUnavailable).
type heldError struct{ err error }

func (h *heldError) Error() string { return h.err.Error() }
func (h *heldError) Unwrap() error { return h.err }

var (
	errAbandoned   = errors.New("redisstore: the caller's context ended before its call was sent (Redis counted nothing)")
	errNotAnswered = errors.New("redisstore: the caller's context ended before Redis replied (Redis may have counted the call)")
)

// do decides n units of key (limit, reserve: see luaSource) by a round
// trip, and returns by ctx's end.
func (b *batcher) do(ctx context.Context, key string, n, limit, reserve int64) (engine.Decision, time.Time, error) {
	dl, hasDeadline := ctx.Deadline()
	// A caller whose context has no deadline has none to keep (a
	// cancellation, as of an HTTP request whose client went away, then
	// returns with the round trip, within the client's timeouts), and one
	// whose client enforces context deadlines (ContextTimeoutEnabled)
	// keeps its own: such a caller, when a sender's slot is free, makes
	// its own round trip, sparing two goroutine handoffs.
	inline := !hasDeadline || b.l.ctxTimeouts
	b.mu.Lock()
	if inline && b.senders < maxSenders && !b.gathering {
		b.senders++
		b.mu.Unlock()
		b.rounds.Add(1)
		slot := b.begin()
		d, at, err := b.l.evalOne(ctx, b.l.client, key, n, limit, reserve)
		if err == nil {
			b.l.answered()
		}
		b.end(slot)
		if err != nil {
			// Judge the failure, and wait for the verdict, before the
			// slot passes on, so that calls queued behind this one are
			// held if Redis is down, not sent into the outage (see
			// send).
			v := b.l.judge(ctx, key, err)
			err = &judgedError{mayHaveCounted(ctx, err), v}
			if v != nil {
				v.wait(ctx.Done())
			}
		}
		b.handOn()
		if err == nil {
			if cerr := ctxDone(ctx); cerr != nil {
				// go-redis reads the reply even after a cancellation
				// (it ends a round trip only by its own timeouts, or by
				// a deadline with ContextTimeoutEnabled): a caller that
				// left while its call was in flight is not admitted,
				// and its answer is the queue's for one given up in
				// flight (below). Redis counted the call.
				return engine.Decision{}, time.Time{}, fmt.Errorf("%w: %w", errNotAnswered, cerr)
			}
		}
		return d, at, err
	}
	c := &call{key: key, n: n, limit: limit, reserve: reserve, deadline: dl, done: make(chan result, 1)}
	b.queue = append(b.queue, c)
	start := b.senders < maxSenders && !b.gathering // a gathering sender takes it
	if start {
		b.senders++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case r := <-c.done:
		return r.d, r.at, r.err
	case <-ctx.Done():
	}
	// The context ended first. The reply may have come at the same time:
	// use it, it is the truth.
	select {
	case r := <-c.done:
		return r.d, r.at, r.err
	default:
	}
	if c.state.CompareAndSwap(queued, abandoned) {
		return engine.Decision{}, time.Time{}, fmt.Errorf("%w: %w", errAbandoned, ctx.Err())
	}
	return engine.Decision{}, time.Time{}, fmt.Errorf("%w: %w", errNotAnswered, ctx.Err())
}

// handOn is called by a caller that made its own round trip in a sender's
// slot: it passes the slot to a sender goroutine if calls are queued, or
// gives it up.
func (b *batcher) handOn() {
	b.mu.Lock()
	more := len(b.queue) > 0
	if !more {
		b.release()
	}
	b.mu.Unlock()
	if more {
		go b.run()
	}
}

// run is a sender goroutine: rounds until the queue is empty.
func (b *batcher) run() {
	for answered := 0; ; {
		n, ok := b.take(answered)
		if !ok {
			return
		}
		answered = n
	}
}

// take sends the queued calls (up to maxBatch) as one round trip, and
// reports how many it sent and whether there were any; if not, it gives up
// the caller's sender's slot. answered is how many calls the sender's
// previous round trip sent: with several, it first gathers (linger.go).
func (b *batcher) take(answered int) (int, bool) {
	b.mu.Lock()
	if b.shouldGather(answered) {
		b.gathering = true
		b.mu.Unlock()
		b.gathers.Add(1)
		b.gather(answered)
		b.mu.Lock()
		b.gathering = false
	}
	if len(b.queue) == 0 {
		b.release()
		b.mu.Unlock()
		return 0, false
	}
	k := min(len(b.queue), maxBatch)
	batch := b.queue[:k:k]
	if k == len(b.queue) {
		b.queue = nil
	} else {
		b.queue = b.queue[k:]
	}
	b.mu.Unlock()
	return b.send(batch), true
}

// release gives up a sender's slot. b.mu is held.
func (b *batcher) release() {
	b.senders--
	if b.senders == 0 {
		for _, ch := range b.idle {
			close(ch)
		}
		b.idle = nil
	}
}

// begin records that a round trip is being sent, in a free slot of
// inflight (there is one: a round trip runs only in one of the maxSenders
// sender slots), and returns the slot, −1 if none was free.
func (b *batcher) begin() int {
	b.l.sending()
	t := b.l.since() + 1
	for i := range b.inflight {
		if b.inflight[i].CompareAndSwap(0, t) {
			return i
		}
	}
	return -1
}

// end records that the round trip begun in slot came back.
func (b *batcher) end(slot int) {
	if slot >= 0 {
		b.inflight[slot].Store(0)
	}
}

// waitInFlight returns when the round trips in flight at its call have
// come back (Close): not those begun after it, which under sustained
// traffic never all end.
func (b *batcher) waitInFlight() {
	var was [maxSenders]int64
	for i := range b.inflight {
		was[i] = b.inflight[i].Load()
	}
	for i := range b.inflight {
		for was[i] != 0 && b.inflight[i].Load() == was[i] {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// wait returns when no sender runs (tests).
func (b *batcher) wait() {
	b.mu.Lock()
	if b.senders == 0 {
		b.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	b.idle = append(b.idle, ch)
	b.mu.Unlock()
	<-ch
}
