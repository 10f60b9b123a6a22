package redisstore

import (
	"context"
	"fmt"
)

// Reset forgets the units key has used, for every replica: it deletes the
// key's state in Redis (one script in the key's hash tag, which also marks
// the reset beside it for one Window and a sub-window), and the next
// decision starts from an empty count under the limit KeyLimit gives. A
// Reservation from before the Reset gives nothing back (its Cancel reports
// false). A decision racing the Reset is counted before it (and
// forgotten) or after it. A key with no state, or longer than
// Config.MaxKeyBytes, is nothing to forget: nil. With FallbackLocal the
// local engine's count is reset too.
//
// Reset never fails silently, and no failure policy answers for it: when
// Redis does not delete the key, it returns an error wrapping
// ErrUnavailable and the cause, counted in Stats().Failures and passed to
// the OnError hook. When ctx ends first it returns an error wrapping ctx's
// error (not counted): Redis may or may not have deleted the key. The
// round trip is the caller's, bounded as the client bounds it.
//
// A hybrid limiter also forgets this replica's units not yet sent, and
// decides the key exactly next. Units other replicas admitted locally and
// have not sent yet (up to each one's local allowance, plus a batch in
// flight) still count in the fresh window, and another replica learns of
// the Reset at its next flush: until then it may deny the key from its
// last observation (README, "Resetting a key").
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
			k.pending, k.seen, k.fullN = 0, false, 0
		}
		h.mu.Unlock()
	}
	return nil
}
