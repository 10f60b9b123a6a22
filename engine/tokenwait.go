package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/internal/callergone"
	"github.com/ringlimit/ringlimit/ringslot"
)

// waitBucket is Wait on a TokenBucket engine. It books the units at once,
// as golang.org/x/time/rate's Wait does (ringslot's Geometry.Book): the
// key's theoretical arrival time moves past them with one CAS, and the
// waiter sleeps until the instant the bucket admits them. Concurrent
// waiters on a key so take consecutive slots, in the order of their CAS,
// and are released at the rate, one slot each, with no retry: nothing is
// asked again after the sleep. A waiter whose ctx ends before its instant
// gives its units back if they are still the key's newest booking
// (Reservation.Cancel's rule); otherwise they stay taken, and the waiters
// behind it keep their slots.
func (e *Engine) waitBucket(ctx context.Context, key string, n int64) (Decision, error) {
	if err := callergone.Err(ctx); err != nil {
		return Decision{}, err
	}
	t := e.now()
	switch {
	case len(key) > e.cfg.maxKey: // the key is not quoted: it is long, and may be anyone's
		return keyTooLong, fmt.Errorf("ringlimit: Wait: %w: the key is %d bytes, longer than Config.MaxKeyBytes = %d", ErrNeverAdmitted, len(key), e.cfg.maxKey)
	case n == 0:
		d, _ := e.decideSlow(key, 0, t)
		return d, nil
	case n < 0 || n > e.limit || t < 0:
		d := Decision{Limit: e.limit, RetryAfter: Never}
		return d, fmt.Errorf("ringlimit: Wait(%q, %d): %w (limit %d): %s", key, n, ErrNeverAdmitted, d.Limit, e.whyNever(key, n, t, d))
	}
	maxWait := int64(Never)
	if dl, ok := ctx.Deadline(); ok {
		maxWait = int64(time.Until(dl))
	}
	h := e.tab.Hash(key)
	r, ok := e.tab.Load(h, key)
	for {
		if !ok {
			if r, _, ok = e.createForWait(h, key, n, t); !ok {
				d := Decision{Limit: e.limit, Remaining: e.limit, RetryAfter: e.cfg.idle}
				return d, fmt.Errorf("ringlimit: Wait(%q, %d): %w (limit %d)", key, n, ErrKeysFull, d.Limit)
			}
		}
		res := e.geo.Book(r, t, n, maxWait)
		if res.Dead {
			r, ok = e.replace(h, key, r, t)
			continue
		}
		d := Decision{Allowed: res.Allowed, Limit: e.limit, Remaining: res.Remaining}
		if !res.Allowed {
			d.RetryAfter = time.Duration(res.RetryAfter)
			if res.RetryAfter == ringslot.Never {
				return d, fmt.Errorf("ringlimit: Wait(%q, %d): %w (limit %d): the key's bookings reach past what its state holds (docs/design.md §11)", key, n, ErrNeverAdmitted, d.Limit)
			}
			return d, fmt.Errorf("ringlimit: Wait(%q, %d): %w: room in %v, the deadline is in %v (limit %d)", key, n, ErrWaitExceedsDeadline, d.RetryAfter, time.Duration(maxWait), d.Limit)
		}
		wait := time.Duration(res.RetryAfter)
		if testHookWaitSleep != nil {
			testHookWaitSleep(d, wait)
		}
		if wait -= time.Duration(e.now() - t); wait <= 0 {
			return d, nil
		}
		if err := e.sleep(ctx, wait); err != nil {
			e.cancel(key, r, res.Epoch, n) // only if still the newest booking
			return Decision{Limit: e.limit, RetryAfter: wait}, err
		}
		return d, nil
	}
}

// createForWait creates key's state for a Wait at t, reporting false when
// MaxKeys refuses it.
func (e *Engine) createForWait(h uint64, key string, n, t int64) (r ringslot.Ring, limit int64, ok bool) {
	r, limit, why := e.create(h, key, n, t)
	return r, limit, why == refusedNone
}

// sleep waits d on the engine's clock (its WaitClock when it has one, so
// that a ManualClock's Advance wakes it), or until ctx ends: then it
// returns ctx's error.
func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	if waiter, ok := e.clk.(WaitClock); ok {
		ch, stop := waiter.After(d)
		defer stop()
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
