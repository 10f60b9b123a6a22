package redisstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// A flush carries each key's units to Redis as a batch and brings back the
// key's count. Its round trips are in flushsend.go.

// flushItem is one key's script call in a flush.
type flushItem struct {
	k     *hkey // nil: the probe's peek
	key   string
	n     int64  // units to add; 0: a pull only
	limit int64  // the key's limit (its last decision's), for the script and its reply
	seq   uint64 // the batch's sequence number; 0 with n == 0
	dDone int64  // k.dDone at the take: shown to be in the pull's reply
	trips uint64 // hybrid.trips at the take
}

type reply struct {
	res any
	err error
}

var (
	errAborted = errors.New("redisstore: the round trip was not sent: the limiter is closing")
	errNotSent = errors.New("redisstore: not sent: an earlier pipeline of the flush failed")
)

// run is the flusher: a flush every interval while Redis answers.
func (h *hybrid) run() {
	defer h.loop.Done()
	t := time.NewTimer(h.interval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		start := time.Now()
		if h.br.err() == nil {
			h.flush(start)
		}
		t.Reset(max(0, h.interval-time.Since(start)))
	}
}

// flush is one regular flush. In the failure state it does nothing: only
// the probe talks to Redis then.
func (h *hybrid) flush(start time.Time) {
	if h.br.err() != nil {
		return
	}
	items := h.take(start, false)
	if len(items) == 0 {
		return
	}
	replies, err := h.send(items, h.stop)
	failed, bad := h.apply(items, replies)
	l := h.l
	switch {
	case errors.Is(err, errAborted):
		// Close came first; the batches are unconfirmed and its last
		// flush sends them.
	case err != nil || failed > 0:
		if err == nil {
			err = firstErr(replies)
		}
		l.failures.Add(1)
		l.report(fmt.Errorf("redisstore: hybrid flush: %d of %d keys failed: %w", failed+bad, len(items), err))
		// A proof opens the failure state; anything else (its deadline
		// passed, a lost connection) is a suspicion: the batches stay
		// unconfirmed, the next flush sends them again, and only a
		// confirmed silence opens it (liveness.go).
		switch {
		case l.multi:
			h.judgeNodes(items, replies, err)
		case classify(err) == proof:
			h.br.trip(err)
		default:
			h.br.suspect()
		}
	default:
		l.flushes.Add(1)
		if time.Since(start) > h.interval/2 {
			l.slowFlushes.Add(1)
		}
		if bad > 0 {
			l.failures.Add(1)
			l.report(fmt.Errorf("redisstore: hybrid flush: %d of %d keys failed, their units given up: %w", bad, len(items), firstErr(replies)))
		}
	}
}

// takeChunk is how many keys take handles per hold of h.mu.
const takeChunk = 64

// keyError reports whether err fails one key only, Redis being up: the
// key holds another type (another client wrote there). Such a key's units
// are given up, and the limiter does not enter its failure state for it.
func keyError(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") }

// probe is the breaker's probe: it resends the unconfirmed batches, or
// peeks at one key when there are none, and succeeds when Redis answers
// every call.
func (h *hybrid) probe(abort <-chan struct{}) error {
	items := h.take(time.Now(), true)
	if len(items) == 0 {
		items = []flushItem{{key: "", limit: h.l.cfg.Limit}} // a peek: reads one key, writes nothing
	}
	replies, err := h.send(items, abort)
	failed, _ := h.apply(items, replies)
	if errors.Is(err, errAborted) {
		return err
	}
	if err == nil && failed > 0 {
		err = firstErr(replies)
	}
	if err != nil {
		h.l.failures.Add(1)
		h.l.report(fmt.Errorf("redisstore: hybrid probe: %w", err))
	}
	return err
}

// take builds a flush's items. A key with an unconfirmed batch sends it
// again as it is; else its pending units become a new batch; else, if
// decided on locally since the last take, it is pulled; else it is
// dropped (its next decision is exact). A key decided on only exactly
// since the last take is dropped: each of those decisions brought its
// count back already, so a key used once costs one script call, as in
// the plain mode, and no flush pulls it. A probe takes only the unconfirmed batches. A batch
// unconfirmed for longer than the horizon is given up.
//
// take lets go of h.mu after every takeChunk keys (h.chunk), so that a decision
// waits for one chunk's bookkeeping at most, however many keys the
// replica holds. Each key is taken whole under the lock; a key a decision
// adds or uses meanwhile is taken now or by the next flush (docs/design.md
// §13, "The take").
func (h *hybrid) take(now time.Time, probe bool) []flushItem {
	h.mu.Lock()
	defer h.mu.Unlock()
	items := make([]flushItem, 0, min(len(h.keys), maxPipeline))
	h.seq++
	seq := h.seq
	visited := 0
	for key, k := range h.keys {
		if visited++; visited%h.chunk == 0 {
			// Ranging on over a map changed meanwhile is defined (a key
			// added may be produced or not; one deleted before it is
			// reached is not), and h.mu orders every access to it.
			pause := h.takePause
			h.mu.Unlock()
			if pause != nil {
				pause()
			}
			h.mu.Lock()
		}
		if k.pulling || h.nodeErr(k, key) != nil {
			continue // a node in its failure state: its probe, then a flush, sends the batch
		}
		if k.batch > 0 && now.Sub(k.batchAt) > h.horizon {
			h.l.lostUnits.Add(uint64(k.batch))
			k.batch, k.batchSeq = 0, 0
		}
		it := flushItem{k: k, key: key, limit: k.lim, dDone: k.dDone, trips: h.trips}
		switch {
		case k.batch > 0:
			it.n, it.seq = k.batch, k.batchSeq
		case probe:
			continue
		case k.pending > 0:
			k.batch, k.batchSeq, k.batchAt, k.pending = k.pending, seq, now, 0
			it.n, it.seq = k.batch, seq
		case k.used:
		case k.calls == 0:
			delete(h.keys, key)
			continue
		default:
			continue // an exact decision in flight will update it
		}
		k.pulling, k.used = true, false
		items = append(items, it)
	}
	return items
}

// apply records the replies (a prefix of items may have one) and returns
// how many items failed, and how many failed with a keyError (their units
// are given up). A confirmed batch leaves the key's state; the
// reply is the key's new observation, and the exact decisions that had
// replied before the take leave dDone (F4 in the proof at hybrid).
func (h *hybrid) apply(items []flushItem, replies []reply) (failed, bad int) {
	now := time.Now().UnixNano()
	// The replies are parsed before h.mu is taken, so that the decisions
	// waiting on it wait for the bookkeeping alone.
	type parsed struct {
		d   engine.Decision
		at  time.Time
		err error
	}
	ps := make([]parsed, len(items))
	for i, it := range items {
		p := &ps[i]
		p.err = errNotSent
		if i < len(replies) {
			p.err = replies[i].err
			if p.err == nil {
				p.d, p.at, p.err = parse(replies[i].res, it.limit)
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, it := range items {
		d, at, err := ps[i].d, ps[i].at, ps[i].err
		k := it.k
		switch {
		case err != nil && keyError(err):
			bad++
			if k != nil {
				k.pulling, k.seen = false, false
				if it.seq != 0 && k.batchSeq == it.seq {
					h.l.lostUnits.Add(uint64(k.batch))
					k.batch, k.batchSeq = 0, 0
				}
			}
			continue
		case err != nil:
			failed++
		}
		if k == nil {
			continue
		}
		k.pulling = false
		if err != nil {
			continue // the batch stays, to be sent again
		}
		if it.seq != 0 && k.batchSeq == it.seq {
			k.batch, k.batchSeq = 0, 0
		}
		k.est, k.estLim, k.obs = it.limit-d.Remaining, it.limit, at.UnixMicro()
		k.seen = it.trips == h.trips // a pull taken before an outage began is no observation after it
		k.dDone -= it.dDone
		k.acks++
		if h.trace != nil {
			h.trace(traceEvent{kind: 'a', key: it.key, exec: k.obs, at: now})
		}
	}
	return failed, bad
}

func firstErr(replies []reply) error {
	for _, r := range replies {
		if r.err != nil {
			return r.err
		}
	}
	return errNotSent
}

// close stops the hybrid mode (see Limiter.Close).
func (h *hybrid) close() error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	close(h.stop)
	h.br.stop()
	h.loop.Wait()

	// The last flush: every unconfirmed batch as it is, then every key's
	// pending units as a new batch, in order (one key's calls go to one
	// node, in the order queued).
	h.mu.Lock()
	h.seq++
	var items []flushItem
	for key, k := range h.keys {
		if k.batch > 0 {
			items = append(items, flushItem{key: key, n: k.batch, limit: k.lim, seq: k.batchSeq})
		}
		if k.pending > 0 {
			items = append(items, flushItem{key: key, n: k.pending, limit: k.lim, seq: h.seq})
		}
	}
	h.mu.Unlock()
	var err error
	if len(items) > 0 {
		replies, serr := h.send(items, nil)
		var lost uint64
		keys := map[string]bool{}
		for i, it := range items {
			if i >= len(replies) || replies[i].err != nil {
				lost += uint64(it.n)
				keys[it.key] = true
			} else if _, _, perr := parse(replies[i].res, it.limit); perr != nil {
				lost += uint64(it.n)
				keys[it.key] = true
			}
		}
		h.mu.Lock()
		for _, k := range h.keys {
			k.pending, k.batch, k.batchSeq = 0, 0, 0 // recorded, or counted as lost
		}
		h.mu.Unlock()
		if lost == 0 {
			h.l.flushes.Add(1)
		} else {
			if serr == nil {
				serr = firstErr(replies)
			}
			h.l.lostUnits.Add(lost)
			h.l.failures.Add(1)
			h.l.report(fmt.Errorf("redisstore: hybrid flush at Close: %w", serr))
			err = fmt.Errorf("redisstore: Close: %d units admitted on %d keys may not be recorded in Redis: %w", lost, len(keys), newTripError(serr))
		}
	}
	h.rts.Wait()
	return err
}
