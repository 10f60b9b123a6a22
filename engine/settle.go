package engine

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/internal/clock"
	"github.com/ringlimit/ringlimit/ringslot"
)

// Errors of Settle and Charge, for errors.Is. Each is wrapped in an error
// that names the call, the key or the reservation's units, and n.
var (
	// ErrSettled: the reservation, or a copy of it, was settled or
	// cancelled before. Nothing was changed.
	ErrSettled = errors.New("the reservation was settled or cancelled already")
	// ErrNotReserved: the reservation recorded no units (it was refused,
	// or reserved 0), so there is nothing to settle; charge a cost known
	// only afterwards with ChargeAt. Nothing was changed.
	ErrNotReserved = errors.New("the reservation holds no units")
	// ErrDebtFull: the key cannot count n more units: its current
	// sub-window would hold more than MaxLimit (2^40 − 1), the most a
	// slot counts, or with SlidingLog its window more than
	// Config.MaxLogLimit, the most one key's log holds, or with
	// TokenBucket the bucket would owe more than one Burst. Nothing was
	// charged.
	ErrDebtFull = errors.New("the key cannot count that many more units")
)

// Settle is SettleAt(actual, now) with now from the engine's clock.
func (r *Reservation) Settle(actual int64) (Decision, error) {
	if r.n == 0 { // also the zero Reservation, which has no engine
		return Decision{}, r.settleErr(actual, ErrNotReserved)
	}
	return r.settle(actual, r.e.now())
}

// SettleAt adjusts an admitted reservation of n units to the actual units
// the work used, actual ≥ 0, once: a settle and Cancel share one claim
// across copies, so a second Settle, a Settle after Cancel and a Cancel
// after Settle change nothing (ErrSettled; Cancel reports false).
//
//   - actual < n: the n − actual units go back to the sub-window they were
//     recorded in, under Cancel's rule (nothing once that sub-window has
//     left the key's window, or the key's state was reclaimed: they count
//     nowhere by then). Settle(0) is Cancel.
//   - actual > n: the difference is charged at now, as ChargeAt does: past
//     the limit if need be, a debt that later requests wait out.
//   - actual = n: nothing changes.
//
// It returns the Decision a one-unit request would get at now, recording
// nothing: Remaining, and when that is 0, the RetryAfter a debt imposes.
// A negative actual, a debt (actual − n) above MaxLimit, a now outside
// 1970 … 2262, a reservation that recorded nothing (ErrNotReserved) or
// was settled already (ErrSettled) is an error that changes nothing and
// returns the zero Decision. An error of the debt's charge (ErrDebtFull,
// ErrKeysFull for a key reclaimed meanwhile and not re-created) leaves
// the reservation settled at its n units.
//
// It allocates nothing, except that a SlidingLog key's log is moved into
// a larger allocation when a debt does not fit it (see ChargeAt).
func (r *Reservation) SettleAt(actual int64, now time.Time) (Decision, error) {
	if r.n == 0 {
		return Decision{}, r.settleErr(actual, ErrNotReserved)
	}
	return r.settle(actual, clock.UnixNano(now))
}

// settle is SettleAt at t (Unix ns, −1 out of range), for r with units.
func (r *Reservation) settle(actual, t int64) (Decision, error) {
	switch {
	case actual < 0:
		return Decision{}, fmt.Errorf("ringlimit: Settle(%d) on a reservation of %d units of %q: actual = %d, want ≥ 0 (the units the work used; 0 gives them all back)", actual, r.n, r.key, actual)
	case actual-r.n > MaxLimit: // no wrap: both ≥ 0
		return Decision{}, fmt.Errorf("ringlimit: Settle(%d) on a reservation of %d units of %q: the debt actual − units = %d is above MaxLimit = %d, the most a sub-window counts", actual, r.n, r.key, actual-r.n, int64(MaxLimit))
	case t < 0:
		return Decision{}, fmt.Errorf("ringlimit: Settle(%d) on a reservation of %d units of %q: the time is before 1970 or after 2262-04-11; nothing was changed", actual, r.n, r.key)
	}
	if !r.take() {
		return Decision{}, r.settleErr(actual, ErrSettled)
	}
	var err error
	switch {
	case actual < r.n:
		r.giveBack(r.n - actual)
	case actual > r.n:
		if _, err = r.e.charge(r.key, actual-r.n, t, r.ring); err != nil {
			err = fmt.Errorf("ringlimit: Settle(%d) on a reservation of %d units of %q, charging the debt of %d: %w", actual, r.n, r.key, actual-r.n, err)
		}
	}
	return r.e.after(r.key, r.ring, t), err
}

func (r *Reservation) settleErr(actual int64, err error) error {
	return fmt.Errorf("ringlimit: Settle(%d) on a reservation of %d units of %q: %w", actual, r.n, r.key, err)
}

// take claims r's units for a Cancel or a Settle: true for exactly one
// call over every copy (claim.go).
func (r *Reservation) take() bool {
	claim := r.claim
	if claim == nil { // AllowAll's own, never copied
		claim = &r.state
	}
	return atomic.CompareAndSwapUint32(claim, 0, 1)
}

// giveBack returns units ≤ r.n of r's claimed units to their sub-window,
// through the self-audit when it shadows the key.
func (r *Reservation) giveBack(units int64) bool {
	if r.audit != 0 {
		return r.e.auditCancel(r.key, r.ring, r.audit-1, r.auditID, units, func() bool { return r.e.cancel(r.key, r.ring, r.at, units) })
	}
	return r.e.cancel(r.key, r.ring, r.at, units)
}

// Charge is ChargeAt(key, n, now) with now from the engine's clock.
func (e *Engine) Charge(key string, n int64) (Decision, error) {
	return e.chargeAt("Charge", key, n, e.now())
}

// ChargeAt records n units for key at now whatever the limit: the cost of
// work that was not reserved, known only after it was done (tokens in a
// response, bytes served). The units count exactly as admitted ones, in
// the sub-window of now (the key's newest when now is older), so they may
// take the key past its limit: a debt. No admission ever passes the
// limit; requests are refused until the debt has left the window, within
// one Window and one sub-window however large it is (docs/semantics.md
// has the bound of each algorithm). It creates the key when absent.
//
// It returns the Decision a one-unit request would get at now, recording
// nothing (Remaining, and the RetryAfter the debt imposes). n = 0 records
// nothing. An error changes nothing: n outside 0 … MaxLimit, a key
// longer than Config.MaxKeyBytes, a now outside 1970 … 2262, a new key at
// Config.MaxKeys (ErrKeysFull), a Config.KeyLimit result out of range,
// and ErrDebtFull when the key cannot count n more units: its current
// sub-window would pass MaxLimit, or with SlidingLog the units in its
// window would pass Config.MaxLogLimit. With SlidingLog a debt is n
// timestamps at now, and the key's log grows to hold them (doubling, under
// its map bucket lock), up to MaxLogLimit units: 8 bytes per unit, the
// bound of a key at the highest limit.
//
// It allocates nothing for an existing key, except that log growth.
func (e *Engine) ChargeAt(key string, n int64, now time.Time) (Decision, error) {
	return e.chargeAt("ChargeAt", key, n, clock.UnixNano(now))
}

// chargeAt is ChargeAt at t (Unix ns, −1 out of range), named what in
// its errors.
func (e *Engine) chargeAt(what, key string, n, t int64) (Decision, error) {
	switch {
	case len(key) > e.cfg.maxKey:
		return keyTooLong, fmt.Errorf("ringlimit: %s: the key is %d bytes, longer than Config.MaxKeyBytes = %d; nothing was charged", what, len(key), e.cfg.maxKey)
	case n < 0 || n > MaxLimit:
		return Decision{}, fmt.Errorf("ringlimit: %s(%q, %d): n = %d, want 0 … %d (MaxLimit)", what, key, n, n, int64(MaxLimit))
	case t < 0:
		return Decision{}, fmt.Errorf("ringlimit: %s(%q, %d): the time is before 1970 or after 2262-04-11; nothing was charged", what, key, n)
	case n == 0:
		return e.after(key, ringslot.Ring{}, t), nil
	}
	d, err := e.charge(key, n, t, ringslot.Ring{})
	if err != nil {
		err = fmt.Errorf("ringlimit: %s(%q, %d): %w", what, key, n, err)
	}
	return d, err
}

// errKeyLimitRange is charge's error for a new key whose Config.KeyLimit
// is out of range.
var errKeyLimitRange = errors.New("Config.KeyLimit returned a limit out of range; nothing was charged")

// charge records 1 ≤ n ≤ MaxLimit units of key at t ≥ 0; hint is a ring of
// the key, or invalid. Its errors are ErrKeysFull, ErrDebtFull and
// errKeyLimitRange, for the caller to name the call.
func (e *Engine) charge(key string, n, t int64, hint ringslot.Ring) (Decision, error) {
	h := e.tab.Hash(key)
	r, ok := hint, hint.Valid()
	if !ok {
		r, ok = e.tab.Load(h, key)
	}
	for {
		if !ok {
			var why refusal
			if r, _, why = e.create(h, key, 1, t); why != refusedNone { // n = 1: create whatever n is
				d, _ := e.decideSlow(key, 0, t)
				if why == refusedLimit {
					return d, errKeyLimitRange
				}
				return d, ErrKeysFull
			}
		}
		c := e.geo.Charge(r, t, n, e.keep())
		switch {
		case c.Dead: // retired (reclaimed, replaced, or a log moved): the key's ring now
			r, ok = e.replace(h, key, r, t)
			continue
		case c.Grow > 0:
			old := r
			grow := func() ringslot.Ring { nr, _ := e.geo.GrowCap(old, c.Grow); return nr } // old if retired: replaced next round
			r, ok = e.tab.Swap(h, key, old, grow)
			continue
		case c.Full:
			return e.after(key, r, t), ErrDebtFull
		}
		if e.sampled(h) {
			e.audit.recordCharge(key, e.effective(t, c.Epoch), n)
		}
		return e.after(key, r, t), nil
	}
}

// keep is the most live units a log may hold with debts: MaxLogLimit,
// the memory bound of one key (ringslot.Geometry.Charge).
func (e *Engine) keep() int64 { return e.maxLimit }

// after is the Decision a one-unit request for key would get at t,
// recording nothing; r is the key's ring if the caller has one.
func (e *Engine) after(key string, r ringslot.Ring, t int64) Decision {
	if r.Valid() {
		limit := e.ringLimit(r)
		if res := e.geo.Peek(r, t, 1, limit); !res.Dead {
			return decision(res, limit)
		}
	}
	if r, ok := e.tab.Load(e.tab.Hash(key), key); ok {
		limit := e.ringLimit(r)
		if res := e.geo.Peek(r, t, 1, limit); !res.Dead {
			return decision(res, limit)
		}
	}
	d, _ := e.decideSlow(key, 0, t) // absent or retired: an empty window
	return d
}
