package redisstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// WithHybrid turns on the hybrid mode, for very hot keys: most decisions are
// made in process, and every interval (1ms ≤ interval ≤ Config.Window) one
// flush carries each key's locally admitted units to Redis and brings back
// the key's count. With Config.KeyLimit, Limit below is the key's own
// limit (the allowance and the bound are per key), and a change of a
// key's limit makes its next decision exact.
//
// Decisions. A decision is exact (one script call, as in the plain mode)
// when this replica has no observation of the key yet (its first decision,
// after the key idled for an interval, after an outage), for a cost n
// above maxLocal (n ≤ Limit), and when the key looks full and no exact
// denial says until when; an exact decision counts the units this replica
// admitted locally and has not recorded yet as if they were in Redis.
// Every other decision is local: n is admitted iff the key's count at the
// observation + this replica's exact admissions that the observation may
// miss + its units not yet confirmed by a flush + n ≤ Limit, and its
// units not yet confirmed stay within its allowance: max(maxLocal,
// ⌊headroom / (3 × replicas)⌋), where headroom is Limit less that count
// and those exact admissions, and replicas is WithReplicas's (default 16).
// A key far below its limit is thus admitted locally up to one allowance
// per interval, which each flush renews (with an interval near the Window,
// far below the limit), and the share shrinks to maxLocal (1 ≤ maxLocal ≤
// Limit) as the key fills. A local denial is one of two: the window is
// full (Remaining < n), with the RetryAfter of this replica's last exact
// denial on the key less the time since, a true lower bound (the first
// such denial is exact); or the replica's share is spent (Remaining ≥ n),
// with RetryAfter one interval, when the next flush renews it.
//
// Flushes. A key decided on only exactly since the last flush (a key used
// once, or rarely) is not pulled: its decision brought its count back
// already, so it costs one script call per decision, as in the plain mode,
// and the next decision is exact again. A flush takes the key's units as one
// batch with a sequence number, and Redis adds a batch at most once (a
// resend or a go-redis retry of an applied batch adds nothing), so a batch
// can be sent again until it is confirmed. The last sequence number applied
// is kept in a small string key next to the key's hash, in the same hash tag
// (the hash's name, ":f:" and a random id of the replica), which expires 2 ×
// (Window + one sub-window) after the replica's last batch on the key: a
// replica holds one such key per hot key. The one case left that counts a
// batch twice is a server that holds a pipeline given up on for longer than
// that and runs it after the resend. Each of a flush's round trips
// (pipelines of at most 1,000 keys) has a deadline of max(10 × interval,
// 500ms), enforced by the limiter whatever the client's timeouts. The next
// flush starts one interval after the previous one started, or at once if it
// took longer. A flush that finds the script missing (NOSCRIPT) loads it
// once and resends those keys in one pipeline (as EVAL if they meet it
// again: a SCRIPT FLUSH in between).
//
// Failures. A flush or exact decision that shows Redis down puts the
// limiter in its failure state, as the plain mode's breaker opens (see
// WithBreaker): an error reply (other than WRONGTYPE, which fails that key
// alone: its units are given up) or a refused connection at once; a flush
// past its deadline or a lost connection only once a confirmation finds
// Redis silent for the client's ReadTimeout (at least 250 ms) of the
// process's own time (the batches stay unconfirmed meanwhile, and the
// next flush sends them again). With a ClusterClient or a Ring the
// failure state is per node (master, shard), as the plain mode's
// breakers: a node's keys get the policy, the others' do not. Each failed
// flush is reported to the OnError hook. In the failure state the failure
// policy answers every decision at once, with an error wrapping
// ErrUnavailable, and a probe resends the unconfirmed batches in the
// background, first one interval later and then at doubling intervals up
// to max(1s, interval).
// Only a probe that Redis answers ends the failure state; after it, each
// key's next decision is exact until a flush or an exact decision observes
// it. A batch still unconfirmed one Window after it was taken is given up
// (Stats().LostUnits).
//
// The bound. Units are recorded at flush time, up to one interval plus one
// flush late (a batch resent after an outage: up to one Window late), so
// they count that much longer, never shorter. Let Q be the key's count as
// the algorithm estimates it from the units recorded in Redis, plus the
// units admitted and not yet recorded, and A_i the largest allowance
// replica i has admitted locally against. While no round trip fails, a
// local decision of replica j that admits leaves
//
//	Q ≤ Limit + Σ over the other replicas i of ((1 + c_i) × A_i + X_i),
//
// where c_i is the number of replica i's flushes that Redis ran after j's
// observation of the key and whose reply i had received, and X_i the units
// i admitted by exact decisions that Redis ran after j's observation. An
// exact decision that admits leaves Q ≤ Limit + Σ_{i≠j} A_i + the units j
// admitted locally while it was in flight (at most A_j). X_i is 0 when i's
// decisions on the key since j's observation were all local.
//
// With R replicas and every X_i = 0: when every flush completes within
// half an interval (Stats().SlowFlushes stays 0), c_i ≤ 2. Each A_i is at
// most max(maxLocal, ⌊H_i / (3 × replicas)⌋), H_i ≤ Limit being the
// headroom i saw, so with R ≤ replicas
//
//	Q ≤ Limit + (R − 1) × max(3 × maxLocal, Limit / replicas),
//
// and near the limit, once every replica's allowance is maxLocal (each
// saw a headroom below 3 × replicas × (maxLocal + 1)), Q ≤ Limit + (R − 1)
// × 3 × maxLocal as with a fixed allowance. Slow flushes (a process short
// of CPU, very many keys) raise c_i, and only the first form holds. With
// KeyLimit, Limit is the key's; after a drop of it, the allowances other
// replicas hold were sized on the old limit, and until their next flushes
// only the first form holds, with those allowances. The
// units admitted within any one window are at most the largest Q. The
// measured overshoots are in the README (TestHybridBoundScale). The proof
// is in the comment on the hybrid type and docs/design.md §13.
func WithHybrid(interval time.Duration, maxLocal int64) Option {
	return func(o *options) error {
		if interval < time.Millisecond {
			return fmt.Errorf("redisstore: WithHybrid interval %v: want 1ms ≤ interval ≤ Config.Window", interval)
		}
		if maxLocal < 1 {
			return fmt.Errorf("redisstore: WithHybrid maxLocal %d: want 1 ≤ maxLocal ≤ Config.Limit", maxLocal)
		}
		o.hybrid, o.interval, o.maxLocal = true, interval, maxLocal
		return nil
	}
}

// Batches go to Redis in pipelines of at most maxPipeline keys, each one
// round trip with its own deadline, so that a flush of many keys is many
// bounded round trips rather than one that no deadline can fit.
const maxPipeline = 1000

// hybrid is the state of the hybrid mode. Below, the proof of the bound
// stated at WithHybrid.
//
// Terms. Time is real time; Redis runs each script at one instant. A unit is
// recorded when Redis runs the script that adds it. For replica i and the
// key: P_i is its pending units (admitted locally, not taken by a flush),
// B_i its batch (taken, not yet confirmed), D_i its exact decisions' units
// that its observation may miss (below), and U_i(t) the units it admitted
// and that are not recorded at t. E(t) is the algorithm's estimate at t of
// the units recorded by t, and Q(t) = E(t) + Σ_i U_i(t). An observation is
// a script's reply: est = Limit − Remaining at the Redis time s it ran. A
// pull is the script a flush runs for the key; its reply confirms the batch
// it carried.
//
// Facts.
//
//	(F1) P_i + B_i ≤ A_i(t) at all times, A_i(t) being the largest
//	     allowance i has admitted locally against by t: a local admission
//	     needs P_i + B_i + n ≤ its allowance then, a take moves P into B,
//	     and only a confirmation empties B. Exact admissions are recorded
//	     when decided, so U_i ⊆ P_i ∪ B_i.
//	(F2) For a fixed set of recorded units the estimate does not grow as
//	     time passes (each sub-window's weight only falls), and recording
//	     moves a unit from U to the current sub-window, where it weighs 1:
//	     only admissions raise Q.
//	(F3) est ≥ E(s) whenever it admits anything: Remaining rounds down, and
//	     when E(s) > Limit, est = Limit and no local admission passes.
//	(F4) Every exact decision of j's that Redis ran after j's observation s
//	     and that admitted (or failed, so may have) is in D_j. Its n enters
//	     D_j when it is sent and leaves when it is denied, or when the reply
//	     of a pull whose take came after its reply arrives (Redis ran it
//	     before that take was sent, so before the pull). j's local units
//	     recorded after s or not recorded are in P_j ∪ B_j: a batch leaves
//	     B_j only with its pull's reply, which becomes the observation, and
//	     an exact decision's reply replaces it only if no pull's reply came
//	     while the decision was in flight (else that pull may be the newer
//	     of the two). A pull's reply may replace a newer exact observation
//	     with an older one; the exact decisions Redis ran in between are
//	     still in D_j, since their replies came after the pull's take.
//	(F5) For replica k and s < x: U_k(s) + (units k admitted locally in
//	     (s, x]) ≤ (1 + c_k) × A_k(x), where c_k counts k's pulls run
//	     after s and confirmed by x. Proof: k's unconfirmed units change by
//	     +admissions −confirmations and are at most A_k(x) at x (F1);
//	     U_k(s) is at most its unconfirmed units at s less the batches
//	     recorded by s and unconfirmed at s, and such a batch confirmed by x
//	     cancels its own confirmation; what is left is at most A_k(x) plus
//	     the batches recorded after s and confirmed by x, each ≤ A_k(x)
//	     (a batch is at most the allowance of the last admission in it).
//
// Local decision by j at x with observation s. By F2, Q(x+) is at most
// E(s), plus j's units recorded after s or not recorded, plus, for each
// i ≠ j, U_i(s) and the units i admitted in (s, x], locally or exactly. j's
// check est + D_j + P_j + B_j + n ≤ Limit with F3 and F4 bounds the first
// two by Limit; F5 bounds i's local part by (1 + c_i) × A_i(x), and its
// exact part is X_i.
//
// Exact decision by j at Redis time z with reserve = P_j + B_j as sent. The
// script admits n iff E(z) + reserve + n ≤ Limit. j's units not recorded at
// z are those in the reserve (still unconfirmed) and those it admitted
// locally since it sent the call (at most A_j); each other replica's are at
// most A_i (F1). ∎
//
// Sizing. j's allowance at a local decision is max(maxLocal, ⌊(Limit − est
// − D_j) / (3 × replicas)⌋) ≤ max(maxLocal, Limit / (3 × replicas)): its
// est, D_j only grow the subtrahend. So 3 × A_i ≤ max(3 × maxLocal,
// Limit / replicas), which with c_i ≤ 2 (Timing, below) gives the simple
// forms at WithHybrid.
//
// Timing. Let every flush take at most F ≤ I/2 from the start of its take
// to its last reply, so that each starts I after the previous one. A take
// lets go of mu between chunks of keys, but takes each key whole at one
// instant in [t, t + F], t the flush's start, which is all that follows
// uses: a key decided on after its take passed it is carried by the next
// flush, or dropped there if it was not decided on locally since (its
// next decision is then exact, a new hkey). j's observation s
// came from a pull in a flush that started at some t ≤ s, or from an exact
// decision at s. j's next flush starts by s + I and replies by s + I + F; it
// carries the key if it was decided on locally, pending or in a batch since
// the take before, and drops it otherwise (its next decision is exact). So a local
// decision x that uses s has x − s < I + F. Replica i's pulls run at
// e_m ∈ [t_m, t_m + F] in flushes that start t_{m+1} ≥ t_m + I, so
// e_{m+2} − e_m ≥ 2I − F ≥ I + F: at most two of them fall in (s, x), and
// c_i ≤ 2.
type hybrid struct {
	l        *Limiter
	interval time.Duration
	maxLocal int64
	replicas int64         // WithReplicas: the allowance is a 1/(3 × replicas) share of the headroom
	timeout  time.Duration // one round trip's deadline
	horizon  time.Duration // an unconfirmed batch is given up this long after its take
	rid      string        // this replica's id, in the batches' deduplication keys
	br       *breaker
	trace    func(traceEvent) // tests only: called with mu held
	chunk    int              // keys per hold of mu in take: takeChunk (tests set it lower, under mu)
	// takePause, tests only (set under mu): called by take between two
	// chunks, mu not held
	takePause func()
	afterLoad func() // tests only: called between a flush's load of the script and its resend (pipeline)

	mu     sync.Mutex // guards keys, every hkey, seq, trips and closed
	keys   map[string]*hkey
	seq    uint64 // the last batch sequence number taken
	trips  uint64 // failure states entered: a reply to a call sent before one is no observation
	closed bool   // Close was called: every decision is exact

	token chan struct{}  // one round trip in flight at a time, held by the goroutine that runs it
	stop  chan struct{}  // closed by close: the flusher ends
	loop  sync.WaitGroup // the flusher
	rts   sync.WaitGroup // round-trip goroutines, one abandoned at its deadline included
}

// hkey is one key's local state. Every field is guarded by hybrid.mu.
type hkey struct {
	est       int64     // the key's count (Limit − Remaining) at the observation
	obs       int64     // the observation's Redis time, µs
	pending   int64     // admitted here since the last take
	batch     int64     // taken and not confirmed: in flight, or left by a failed flush
	batchSeq  uint64    // the batch's sequence number
	batchAt   time.Time // when the batch was taken
	dFlight   int64     // units of exact decisions in flight (F4 in the proof at hybrid)
	dDone     int64     // units of exact decisions that admitted or failed, not yet shown to be in est
	calls     int32     // exact decisions in flight
	node      string    // the key's node's address (multi-node clients; see nodeOf)
	nodeSet   bool      // node is known
	acks      uint32    // pull replies applied so far
	seen      bool      // est holds an observation
	pulling   bool      // a flush carrying the key is in flight
	used      bool      // decided on locally since the last take
	lim       int64     // the key's limit at its last decision (Config.KeyLimit's, or Config.Limit)
	estLim    int64     // the limit est was read with: Redis clamps est at it, so est is valid for that limit only
	fullN     int64     // > 0: no request of fullN or more units fits before fullUntil (an exact denial)
	fullUntil time.Time
}

// traceEvent is what the tests' trace hook sees: 'a' a pull's reply
// confirmed (exec: when Redis ran it), 'l' a local admission (exec: the
// observation it used), 'x' an exact admission (exec: when Redis ran it);
// at is the local time (UnixNano) under the lock.
type traceEvent struct {
	kind     byte
	key      string
	n        int64
	exec, at int64
	allow    int64 // 'l': the allowance the admission was checked against
}

func (l *Limiter) startHybrid() error {
	o := l.opts
	if o.maxLocal > l.cfg.Limit {
		return fmt.Errorf("redisstore: WithHybrid maxLocal %d: want 1 ≤ maxLocal ≤ Config.Limit (%d)", o.maxLocal, l.cfg.Limit)
	}
	if o.interval > l.cfg.Window {
		return fmt.Errorf("redisstore: WithHybrid interval %v: want 1ms ≤ interval ≤ Config.Window (%v)", o.interval, l.cfg.Window)
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	h := &hybrid{
		l: l, interval: o.interval, maxLocal: o.maxLocal, replicas: int64(cmp.Or(o.replicas, DefaultReplicas)),
		timeout: max(10*o.interval, 500*time.Millisecond),
		horizon: l.cfg.Window,
		rid:     hex.EncodeToString(id[:]),
		chunk:   takeChunk,
		keys:    map[string]*hkey{},
		token:   make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	h.br = newBreaker(h.probe, o.interval, max(time.Second, o.interval), o.manual)
	h.br.onClose = l.startCheck // the outage may have been a restart or a failover: another server
	h.br.onOpen = h.opened
	h.br.opens = &l.breakerOpens
	h.br.bg = l.bg
	addr, node := l.node(l.bg, "")
	h.br.budget = l.live
	h.br.check = func(ctx context.Context) error { return l.check(ctx, addr, node, "") }
	l.confirming(h.br, addr, node)
	l.hyb = h
	if !o.manual {
		h.loop.Add(1)
		go h.run()
	}
	return nil
}

func (l *Limiter) hybridAllow(ctx context.Context, key string, n, limit int64) (engine.Decision, error) {
	h := l.hyb
	h.mu.Lock()
	if h.closed {
		var reserve int64
		if k := h.keys[key]; k != nil {
			reserve = k.pending + k.batch
		}
		h.mu.Unlock()
		return l.exactAfterClose(ctx, key, n, limit, reserve)
	}
	if err := h.br.err(); err != nil {
		h.mu.Unlock()
		l.fallbacks.Add(1)
		return l.policy(key, n, limit), err
	}
	k := h.keys[key]
	if k == nil {
		k = &hkey{}
		h.keys[key] = k
	}
	if err := h.nodeErr(k, key); err != nil { // the key's node's failure state
		h.mu.Unlock()
		l.fallbacks.Add(1)
		return l.policy(key, n, limit), err
	}
	if k.lim != limit { // a new key, or KeyLimit's answer changed: Redis's count is read again
		k.lim, k.fullN = limit, 0
	}
	if k.seen && n <= h.maxLocal && k.estLim == limit {
		if d, ok := h.local(k, key, n, limit, time.Now()); ok {
			k.used = true
			h.mu.Unlock()
			l.localDecisions.Add(1)
			return d, nil
		}
	}
	reserve := k.pending + k.batch
	sent := max(0, n) // what this call may record
	k.dFlight += sent
	k.calls++
	acks, trips := k.acks, h.trips
	h.mu.Unlock()

	sentAt := time.Now()
	d, at, err := l.batch.do(ctx, key, n, limit, reserve)

	h.mu.Lock()
	if err == nil && h.trips == trips { // a reply from before an outage says nothing of Redis after it
		k.denied(d, n, sentAt)
	}
	k.dFlight -= sent
	k.calls--
	if err != nil || d.Allowed {
		k.dDone += sent // recorded, or may have been
	}
	if err == nil && k.acks == acks && h.trips == trips {
		// No pull's reply came while this call was in flight, so none
		// that Redis ran after it: its reply is the newest observation
		// (F4 in the proof at hybrid). Unless an outage began meanwhile:
		// then the key waits for an observation made after it.
		k.est, k.estLim, k.obs, k.seen = limit-d.Remaining, limit, at.UnixMicro(), true
	}
	if err == nil && d.Allowed && n > 0 && h.trace != nil {
		h.trace(traceEvent{kind: 'x', key: key, n: n, exec: at.UnixMicro(), at: time.Now().UnixNano()})
	}
	h.mu.Unlock()
	if err != nil {
		var held *heldError
		if errors.As(err, &held) { // its node's failure state began while it was queued: never sent
			if cerr := ctxDone(ctx); cerr != nil {
				return l.gone(key, limit, cerr, nil)
			}
			l.fallbacks.Add(1)
			return l.policy(key, n, limit), held.err
		}
		return l.fail(ctx, key, n, limit, err) // judges it for h.br (per node: the node's), as for a plain breaker
	}
	l.redisDecisions.Add(1)
	l.answeredDecision()
	return h.adjust(d, n, reserve), nil
}

// exactAfterClose is a decision after Close: one script call, counting the
// units the last flush may still be carrying; the key's state is left alone.
func (l *Limiter) exactAfterClose(ctx context.Context, key string, n, limit, reserve int64) (engine.Decision, error) {
	d, _, err := l.batch.do(ctx, key, n, limit, reserve)
	if err != nil {
		return l.fail(ctx, key, n, limit, err)
	}
	l.redisDecisions.Add(1)
	return l.hyb.adjust(d, n, reserve), nil
}

// opened is called when the failure state begins (h.br opened): every key
// needs a new observation, since its est is as old as the outage will be.
func (h *hybrid) opened() {
	h.mu.Lock()
	h.trips++
	for _, k := range h.keys {
		k.seen, k.fullN = false, 0 // Redis may come back without the counts
	}
	h.mu.Unlock()
}
