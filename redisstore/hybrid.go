package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// WithHybrid turns on the hybrid mode, for very hot keys: decisions are made
// in process, and every interval (≥ 1ms) one pipeline carries each key's
// admitted units to Redis (the same script, adding without the check) and
// brings back the key's global estimate.
//
// A key's first decision is exact (one script call), which seeds its
// estimate. After that a decision admits n iff estimate + units admitted
// here since the last flush + n ≤ Limit, and at most maxLocal units
// (1 ≤ maxLocal ≤ Limit) per key between two flushes: past that the key is
// refused until the next flush (RetryAfter = interval).
//
// The bound: a replica's view of a key misses only what the other replicas
// admitted since its last pull, and each of them admits at most maxLocal
// per flush interval, so with R replicas a window can hold at most
// (R − 1) × 2 × maxLocal units beyond the algorithm's own bound (two
// intervals: the other replica's push, then this one's pull). Units are
// recorded in Redis at flush time, up to one interval late, which makes
// them count up to one interval longer (never shorter). RetryAfter on a
// hybrid denial is advisory: one interval, or one sub-window.
func WithHybrid(interval time.Duration, maxLocal int64) Option {
	return func(o *options) error {
		if interval < time.Millisecond {
			return fmt.Errorf("redisstore: WithHybrid interval %v: want ≥ 1ms", interval)
		}
		if maxLocal < 1 {
			return fmt.Errorf("redisstore: WithHybrid maxLocal %d: want ≥ 1 (and ≤ Limit)", maxLocal)
		}
		o.hybrid, o.interval, o.maxLocal = true, interval, maxLocal
		return nil
	}
}

type hybrid struct {
	mu       sync.Mutex // guards keys and each hkey
	keys     map[string]*hkey
	degraded bool // the last flush failed: the failure policy decides
	stop     chan struct{}
	done     chan struct{}
}

type hkey struct {
	est     int64 // the global count at the last pull (Limit − Remaining)
	pending int64 // admitted here since the last flush
	used    bool  // decided on since the last flush
}

func (l *Limiter) startHybrid() error {
	if l.opts.maxLocal > l.cfg.Limit {
		return fmt.Errorf("redisstore: WithHybrid maxLocal %d: want ≤ Limit (%d)", l.opts.maxLocal, l.cfg.Limit)
	}
	h := &hybrid{keys: map[string]*hkey{}, stop: make(chan struct{}), done: make(chan struct{})}
	l.hyb = h
	go func() {
		defer close(h.done)
		t := time.NewTicker(l.opts.interval)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				l.flush()
				return
			case <-t.C:
				l.flush()
			}
		}
	}()
	return nil
}

func (l *Limiter) hybridAllow(ctx context.Context, key string, n int64) (engine.Decision, error) {
	h, limit := l.hyb, l.cfg.Limit
	h.mu.Lock()
	k, ok := h.keys[key]
	degraded := h.degraded
	if ok && !degraded {
		k.used = true
		rem := max(0, limit-k.est-k.pending)
		d := engine.Decision{Limit: limit, Remaining: rem}
		switch {
		case n < 0 || n > limit:
			d.RetryAfter = engine.Never
		case n == 0:
			d.Allowed = true
		case k.est+k.pending+n <= limit && k.pending+n <= l.opts.maxLocal:
			k.pending += n
			d.Allowed, d.Remaining = true, rem-n
		default:
			d.RetryAfter = l.opts.interval
			if k.pending+n <= l.opts.maxLocal {
				d.RetryAfter = time.Duration(l.width)
			}
		}
		h.mu.Unlock()
		l.decisions.Add(1)
		return d, nil
	}
	h.mu.Unlock()
	if degraded {
		return l.fail(key, n, errors.New("hybrid mode: the last flush failed"), false), nil
	}
	d, _, err := l.eval(ctx, key, n)
	if err != nil {
		return l.fail(key, n, err, true), nil
	}
	l.decisions.Add(1)
	h.mu.Lock()
	if _, ok := h.keys[key]; !ok {
		h.keys[key] = &hkey{est: limit - d.Remaining, used: true}
	}
	h.mu.Unlock()
	return d, nil
}

// flush pushes every key's pending units and pulls its estimate, in one
// pipeline. A key neither used nor pending since the last flush is dropped
// (its next decision is exact again).
func (l *Limiter) flush() {
	h := l.hyb
	type item struct {
		key string
		n   int64
		cmd *redis.Cmd
	}
	h.mu.Lock()
	items := make([]item, 0, len(h.keys))
	for key, k := range h.keys {
		if !k.used && k.pending == 0 {
			delete(h.keys, key)
			continue
		}
		items = append(items, item{key: key, n: k.pending})
		k.est += k.pending // still counted here while in flight
		k.pending, k.used = 0, false
	}
	if len(items) == 0 {
		h.degraded = false // the next decision per key is exact again
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), max(l.opts.interval*10, 500*time.Millisecond))
	defer cancel()
	pipe := l.client.Pipeline()
	for i := range items {
		items[i].cmd = script.EvalSha(ctx, pipe, []string{l.Key(items[i].key)}, l.flushArgs(items[i].n)...)
	}
	_, _ = pipe.Exec(ctx)
	failed := false
	for i := range items {
		it := &items[i]
		res, err := it.cmd.Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			l.noscript.Add(1) // it did not run: EVAL, once
			res, err = script.Eval(ctx, l.client, []string{l.Key(it.key)}, l.flushArgs(it.n)...).Result()
		}
		var d engine.Decision
		if err == nil {
			d, _, err = parse(res, l.cfg.Limit)
		}
		if err != nil {
			// Not resent: a timed-out call may have counted. The units
			// stay counted here (in est) until the key is dropped.
			failed = true
			l.failures.Add(1)
			if l.opts.onError != nil {
				l.opts.onError(fmt.Errorf("redisstore: hybrid flush of key %q: %w", it.key, err))
			}
			continue
		}
		h.mu.Lock()
		if k, ok := h.keys[it.key]; ok {
			k.est = l.cfg.Limit - d.Remaining
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	h.degraded = failed
	h.mu.Unlock()
}

func (l *Limiter) flushArgs(n int64) []any {
	args := make([]any, 0, 7)
	args = append(args, n)
	args = append(args, l.args...)
	return append(args, "1")
}
