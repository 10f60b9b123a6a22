package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ringlimit/ringlimit/internal/callergone"
)

// WaitClock is a Clock that can also wait on its own time. When the
// engine's Clock implements it (ManualClock does), Wait sleeps through
// After instead of a time.Timer, so that a test or a simulation that moves
// the clock also wakes the waiters: ManualClock's Advance and Set end every
// wait whose end they reach, and ManualClock.Waits counts the pending ones.
type WaitClock interface {
	Clock
	// After returns a channel that is closed once the clock reads at
	// least its reading at the call plus d, and a function that releases
	// the wait early (idempotent; Wait calls it when ctx ends, and after
	// the channel closed).
	After(d time.Duration) (ch <-chan struct{}, stop func())
}

// Errors of Wait, for errors.Is. Wait wraps each of them in an error that
// also names the key, n, the limit and, for ErrNeverAdmitted, which cause
// applied (a key longer than Config.MaxKeyBytes is not quoted, only its
// length); when ctx ends, Wait returns ctx's error as it is.
var (
	// ErrNeverAdmitted: the request can never be admitted as asked: n < 0,
	// n above the key's limit (TokenBucket: its Burst), a Config.KeyLimit
	// result out of range, or the engine's clock outside 1970 … 2262
	// (Decision.Reason is ReasonNever); or the key is longer than
	// Config.MaxKeyBytes (ReasonKeyTooLong). With TokenBucket also a
	// booking further ahead than the key's state reaches (2^61·gcd(Limit,
	// Window)/Limit ns; docs/design.md §11).
	ErrNeverAdmitted = errors.New("the request can never be admitted")
	// ErrKeysFull: the key is new and Config.MaxKeys keys are held
	// (ReasonKeysFull). Wait does not wait for room, which depends on
	// other keys going idle.
	ErrKeysFull = errors.New("the key is new and MaxKeys keys are held")
	// ErrWaitExceedsDeadline: the key's window makes room for n units only
	// after ctx's deadline, so Wait returned at once rather than sleep in
	// vain.
	ErrWaitExceedsDeadline = errors.New("the wait would exceed the context's deadline")
)

// maxWaitJitter bounds the jitter Wait adds to a RetryAfter: waiters woken
// by one expiry spread their retries over up to this much (and over at most
// an eighth of the wait), rather than retrying in one instant.
const maxWaitJitter = time.Millisecond

// testHookWaitSleep, when a test sets it, runs before each sleep of Wait
// with the denial and the wait chosen.
var testHookWaitSleep func(d Decision, wait time.Duration)

// Wait blocks until n units for key are admitted, or ctx is done, or the
// request can never be admitted. It returns the Decision of its last
// attempt, and a nil error exactly when that Decision is Allowed.
//
//   - n == 0 is admitted at once (it records nothing).
//   - When ctx is done or its deadline has passed (before ctx's timer has
//     fired too), at the call or during a sleep, it returns ctx's error
//     (context.DeadlineExceeded for a deadline), with the last denial, and
//     records nothing.
//   - It returns at once with an error wrapping ErrNeverAdmitted or
//     ErrKeysFull when n can never fit, and ErrWaitExceedsDeadline when
//     the room comes after ctx's deadline.
//
// Otherwise it sleeps until the denial's RetryAfter, plus a jitter of at
// most min(RetryAfter/8, 1 ms), has passed on the engine's clock, and asks
// again: at most one attempt per RetryAfter, never a spin, and no queue (a
// waiter has no priority over newer requests). A Clock that implements
// WaitClock (ManualClock does) is slept on, so that a test moves waiters
// by advancing it (docs/semantics.md, "Reservations, all-or-nothing, and
// Wait").
//
// With TokenBucket, Wait instead books its units at once, as
// golang.org/x/time/rate's Wait does, and sleeps until the bucket admits
// them: concurrent waiters are released at the rate, in the order they
// booked. ErrWaitExceedsDeadline is returned, recording nothing, when that
// instant is past ctx's deadline; a waiter whose ctx ends gives its
// booking back if it is still the key's newest.
func (e *Engine) Wait(ctx context.Context, key string, n int64) (Decision, error) {
	if e.geo.IsBucket() {
		return e.waitBucket(ctx, key, n) // books its slot: tokenwait.go
	}
	waiter, _ := e.clk.(WaitClock)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var last Decision // the last denial, returned when the caller has gone
	for {
		// A caller who has gone (ctx done, or its deadline passed before
		// its timer fired) is asked nothing: an admission would charge
		// units nobody uses. Checked before every attempt, so also when
		// the deadline passed during the sleep.
		if err := callergone.Err(ctx); err != nil {
			return last, err
		}
		// AllowN, keeping its time t: the sleep ends RetryAfter after t,
		// however long the decision and the rest took.
		t := e.now()
		var d Decision
		if res, limit, ok := e.fast(key, n, t, true); ok {
			d = decision(res, limit)
		} else {
			d, _ = e.decideSlow(key, n, t)
		}
		switch d.Reason() {
		case ReasonOK:
			return d, nil
		case ReasonNever:
			return d, fmt.Errorf("ringlimit: Wait(%q, %d): %w (limit %d): %s", key, n, ErrNeverAdmitted, d.Limit, e.whyNever(key, n, t, d))
		case ReasonKeysFull:
			return d, fmt.Errorf("ringlimit: Wait(%q, %d): %w (limit %d)", key, n, ErrKeysFull, d.Limit)
		case ReasonKeyTooLong: // the key is not quoted: it is long, and may be anyone's
			return d, fmt.Errorf("ringlimit: Wait: %w: the key is %d bytes, longer than Config.MaxKeyBytes = %d", ErrNeverAdmitted, len(key), e.cfg.maxKey)
		}
		last = d
		wait := max(d.RetryAfter, 1) // a limited denial's is > 0; never a zero sleep, which would spin
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left < wait {
				return d, fmt.Errorf("ringlimit: Wait(%q, %d): %w: room in %v, the deadline is in %v (limit %d)", key, n, ErrWaitExceedsDeadline, d.RetryAfter, left, d.Limit)
			}
			wait += jitter(min(wait, left-wait))
		} else {
			wait += jitter(wait)
		}
		if testHookWaitSleep != nil {
			testHookWaitSleep(d, wait)
		}
		// The time since the decision counts (on the engine's clock:
		// a ManualClock moved meanwhile shortens the sleep). Not a spin:
		// the next attempt is still wait after this one's t.
		if wait -= time.Duration(e.now() - t); wait <= 0 {
			continue
		}
		if waiter != nil {
			ch, stop := waiter.After(wait)
			select {
			case <-ch:
				stop()
			case <-ctx.Done():
				stop()
				return d, ctx.Err()
			}
			continue
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait) // Go ≥ 1.23: no stale expiry survives Reset
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return d, ctx.Err()
		}
	}
}

// jitter returns a random duration in [0, min(d/8, maxWaitJitter)].
func jitter(d time.Duration) time.Duration {
	if j := min(d/8, maxWaitJitter); j > 0 {
		return rand.N(j + 1)
	}
	return 0
}

// whyNever says what made a Wait attempt at t ReasonNever, from what Wait
// knows: its n and t, and the Decision.
func (e *Engine) whyNever(key string, n, t int64, d Decision) string {
	switch {
	case t < 0:
		return "the engine's clock reads a time before 1970 or after 2262-04-11 (outside int64 Unix nanoseconds)"
	case n < 0:
		return "n is negative"
	case n > d.Limit:
		return "n is above the key's limit"
	}
	if _, held := e.tab.Load(e.tab.Hash(key), key); !held && e.keyLimit != nil {
		return fmt.Sprintf("Config.KeyLimit returned a limit outside 1 … %d for the key", e.maxLimit)
	}
	// n fits the limit and the clock is in range: the key's window makes
	// room only at an instant int64 nanoseconds cannot name.
	return fmt.Sprintf("n fits the key's limit, but the key's window makes room for it only after 2262-04-11T23:47:16.854775807Z, the last instant the engine represents (the clock reads %s)", time.Unix(0, t).UTC().Format(time.RFC3339Nano))
}
