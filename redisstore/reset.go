package redisstore

import (
	"context"
	"fmt"
)

// Reset forgets the units key has used, for every replica: it deletes the
// key's state in Redis (one script: the DEL of the Redis key that Key
// names, and a reset mark beside it, Key(key)+":reset", in the key's hash
// tag, so Cluster-safe), and the next decision starts from an empty count.
// A Reservation from before the Reset gives nothing back to the fresh
// count (its Cancel reports false), as the engine's; the mark expires one
// Window and one sub-window after the Reset. A key with no state in Redis (never used, or expired)
// is nothing to forget: Reset returns nil. A key longer than
// Config.MaxKeyBytes is never stored, and Reset returns nil at once.
//
// It keeps the key's limit, which Config.KeyLimit gives on every decision.
// A decision that races the Reset is counted before it (and forgotten) or
// after it, as Redis ran the two. With the failure policy FallbackLocal,
// the local engine's count for the key is reset too (engine.Reset),
// whatever Redis answered.
//
// Reset never fails silently, and no failure policy answers for it. When
// Redis does not delete the key (an error reply, a refused connection, a
// timeout), Reset returns an error wrapping ErrUnavailable and the cause,
// counts it in Stats().Failures and passes it to the OnError hook: the
// count was not reset, and the caller decides what to do. It makes its
// round trip on the caller's goroutine, bounded as the client bounds it
// (with ContextTimeoutEnabled, by ctx's deadline). When ctx ends first,
// Reset returns an error wrapping ctx's error (not ErrUnavailable, and not
// counted): Redis may or may not have deleted the key.
//
// A hybrid limiter (WithHybrid) also forgets this replica's units not yet
// sent to Redis, and makes its next decision on the key exact. Units that
// other replicas admitted locally and have not sent yet (at most maxLocal
// each, plus a batch in flight) still reach Redis after the Reset, and
// count in the fresh window.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if len(key) > l.norm.MaxKeyBytes {
		return nil
	}
	if l.local != nil {
		l.local.Reset(key)
	}
	if err := ctxDone(ctx); err != nil {
		return fmt.Errorf("redisstore: Reset(%q): nothing was reset: %w", key, err)
	}
	if err := l.resetState(ctx, key); err != nil { // DEL, and the mark that keeps older reservations out of the fresh count
		if cerr := ctxDone(ctx); cerr != nil {
			return fmt.Errorf("redisstore: Reset(%q): the caller's context ended before Redis answered (Redis may have deleted the key): %w", key, cerr)
		}
		l.failures.Add(1)
		e := fmt.Errorf("redisstore: Reset(%q): the count was not reset: %w", key, err)
		l.report(e)
		return fmt.Errorf("%w (Reset(%q), the count was not reset): %w", ErrUnavailable, key, backendCause(err))
	}
	if h := l.hyb; h != nil {
		h.mu.Lock()
		if k := h.keys[key]; k != nil {
			// The units admitted here and not taken yet are forgotten with
			// the count; a batch already taken may still arrive. The next
			// decision is exact: an observation from before the DEL is
			// stale. dDone stays: a flush in flight subtracts what it took
			// of it, and a stale dDone only over-counts, until then.
			k.pending, k.seen = 0, false
		}
		h.mu.Unlock()
	}
	return nil
}
