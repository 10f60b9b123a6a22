package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// ErrHybridReserve is the error of Reserve, ReserveN and ChargeN on a
// hybrid limiter (WithHybrid), and CanReserve's: its replicas admit
// against a local estimate that only their flushes reconcile, and no bound
// is proven for units given back or charged beside them. Use a plain
// limiter for reservations, in-flight limits and settled costs.
var ErrHybridReserve = errors.New("redisstore: a hybrid limiter (WithHybrid) cannot reserve, cancel, settle or charge units; use a limiter without WithHybrid")

// ErrBucketReserve is returned by Reserve, ChargeN and CanReserve on a
// TokenBucket limiter: the reservation script adjusts a window's
// sub-window, and a bucket's state has none. Decide with AllowN, or reserve
// on the engine's TokenBucket in process.
var ErrBucketReserve = errors.New("redisstore: a TokenBucket limiter cannot reserve, cancel, settle or charge units through Redis; use AllowN, or the engine's TokenBucket in process")

// ErrNotApplied is wrapped by the error of a Cancel, Settle or ChargeN
// that Redis did not apply, or may not have (a failed round trip, an open
// breaker, a caller whose context ended while it was in flight). It wraps
// the cause too (ErrUnavailable for an open breaker). Such a call is never
// sent again: units not given back leave the window with their
// sub-window; units not charged are not counted. Each is counted in
// Stats().CancelErrors or Stats().ChargeErrors and passed to the OnError
// hook.
var ErrNotApplied = errors.New("redisstore: not applied in Redis (or not known to be)")

// Reservation is the outcome of Reserve: a Decision whose units, when it
// was Allowed, can be given back (Cancel) or adjusted to what the work
// used (Settle), as engine.Reservation's. It carries the key, the units
// and the sub-window they were recorded in, and Cancel and Settle adjust
// that sub-window's count in one script call.
//
// Copies share one claim on the units: Cancel or Settle on any copy acts at
// most once, also when called concurrently. A Reservation that
// FallbackLocal admitted while Redis failed holds its units in the local
// engine, and is cancelled or settled there. The zero Reservation holds
// nothing.
type Reservation struct {
	d     engine.Decision
	l     *Limiter
	key   string
	n     int64        // units held: in Redis when claim is set, else in local
	epoch int64        // the sub-window (Redis TIME / width) the units were recorded in
	mark  int64        // the state's incarnation they were counted in (heldSource's mark)
	claim *atomic.Bool // shared by copies: set by the one Cancel or Settle that acts
	local engine.Reservation
}

// CanReserve is nil when the Limiter can reserve, cancel, settle and
// charge, and ErrHybridReserve for a hybrid limiter. httplimit and
// grpclimit ask it at construction for WithInFlight and WithSettle.
func (l *Limiter) CanReserve() error {
	if l.hyb != nil {
		return ErrHybridReserve
	}
	if l.tb != nil {
		return ErrBucketReserve
	}
	return nil
}

// Reserve is AllowN whose admitted units can be given back or settled: it
// decides and records exactly as AllowN(ctx, key, n) does (one script
// call, the same failure policies), and the Reservation says where the
// units went. It makes its round trip on the caller's goroutine, bounded
// by the client's timeouts (with ContextTimeoutEnabled, by ctx), not
// shared with other calls as AllowN's are.
func (l *Limiter) Reserve(ctx context.Context, key string, n int64) (Reservation, error) {
	r := Reservation{l: l, key: key}
	if l.hyb != nil {
		r.d = engine.Decision{Limit: l.cfg.Limit, RetryAfter: engine.Never}
		return r, fmt.Errorf("redisstore: Reserve(%q, %d): %w", key, n, ErrHybridReserve)
	}
	if l.tb != nil {
		r.d = engine.Decision{Limit: l.cfg.Limit, RetryAfter: engine.Never}
		return r, fmt.Errorf("redisstore: Reserve(%q, %d): %w", key, n, ErrBucketReserve)
	}
	if len(key) > l.norm.MaxKeyBytes {
		r.d = engine.Decision{RetryAfter: engine.Never} // ReasonKeyTooLong, as AllowN's
		return r, nil
	}
	limit, ok := l.limitOf(key)
	if err := ctxDone(ctx); err != nil {
		var gerr error
		r.d, gerr = l.gone(key, limit, err, nil)
		return r, gerr
	}
	if !ok || n < 0 || n > limit {
		r.d = engine.Decision{Limit: limit, RetryAfter: engine.Never}
		return r, nil
	}
	if err := l.breakerErr(ctx, key); err != nil {
		l.fallbacks.Add(1)
		r.d = l.reservePolicy(&r, n, limit)
		return r, err
	}
	rep, err := l.held(ctx, opReserve, key, n, limit, 0, 0)
	if err != nil {
		v := l.judge(ctx, key, err)
		err = &judgedError{mayHaveCounted(ctx, err), v}
		r.d, err = l.failWith(ctx, key, n, limit, err, func() engine.Decision { return l.reservePolicy(&r, n, limit) })
		return r, err
	}
	l.redisDecisions.Add(1)
	l.answeredDecision()
	r.d = rep.d
	if rep.d.Allowed && n >= 1 && rep.x >= 0 {
		r.n, r.epoch, r.mark, r.claim = n, rep.x, rep.mark, new(atomic.Bool)
	}
	return r, nil
}

// reservePolicy is the failure policy's Decision for a reservation r of n
// units: FallbackLocal's is reserved in the local engine, and held there.
func (l *Limiter) reservePolicy(r *Reservation, n, limit int64) engine.Decision {
	if l.opts.policy != FallbackLocal || n < 0 || n > limit {
		return l.policy(r.key, n, limit)
	}
	r.local = l.local.Reserve(r.key, n)
	r.n = r.local.Units()
	d := r.local.Decision()
	if !d.Allowed && d.RetryAfter == engine.Never {
		d.RetryAfter = time.Duration(l.width) // as policy: it can fit once Redis answers
	}
	return d
}

// ReserveN is Reserve in the shape of httplimit.ReservingLimiter and
// grpclimit.ReservingLimiter, for WithInFlight and WithSettle: when it
// admits and holds units, settle is the Reservation's Settle; after an
// admission of n = 0, settle charges the actual units (ChargeN); otherwise
// (a refusal, a FailOpen admission) it is nil.
func (l *Limiter) ReserveN(ctx context.Context, key string, n int64) (engine.Decision, func(ctx context.Context, actual int64) (engine.Decision, error), error) {
	r, err := l.Reserve(ctx, key, n)
	switch {
	case !r.d.Allowed:
		return r.d, nil, err
	case r.n > 0:
		return r.d, r.Settle, err
	case err == nil:
		d := r.d
		return d, func(ctx context.Context, actual int64) (engine.Decision, error) {
			if actual == 0 {
				return d, nil
			}
			return l.ChargeN(ctx, key, actual)
		}, nil
	}
	return r.d, nil, err
}

// Decision returns the decision the Reservation was made with.
func (r *Reservation) Decision() engine.Decision { return r.d }

// Key returns the key the Reservation was made for.
func (r *Reservation) Key() string { return r.key }

// Units returns the units the Reservation holds: n when it was Allowed
// with n ≥ 1, else 0. Cancel and Settle do not change it.
func (r *Reservation) Units() int64 { return r.n }

// At returns the start of the sub-window the units were recorded in (in
// Redis TIME; the local engine's time for a FallbackLocal admission), or
// the zero Time when none were.
func (r *Reservation) At() time.Time {
	switch {
	case r.n == 0:
		return time.Time{}
	case r.claim == nil:
		return r.local.At()
	}
	return time.Unix(0, r.epoch*r.l.width) // width: ns, a whole number of µs
}

// Cancel returns the Reservation's units to the sub-window they were
// recorded in, and reports whether it did, as engine.Reservation's
// Cancel: it returns false and changes nothing when the Reservation holds
// no units, when it (or a copy) was cancelled or settled before, and when
// the sub-window has left the key's window (the key's newest sub-window is
// N+1 or more after it; FixedWindow: a later window), the key expired, or
// the key's state is not the one the units were counted in (a Reset ran
// since, or Redis lost the state and a reservation created it afresh:
// docs/design.md §12).
//
// A ctx already done sends nothing and returns its error: the units stay
// held, for a later Cancel. A round trip that fails is not sent again; its
// error wraps ErrNotApplied (see there).
func (r *Reservation) Cancel(ctx context.Context) (bool, error) {
	switch {
	case r.n == 0:
		return false, nil
	case r.claim == nil:
		return r.local.Cancel(), nil
	}
	if err := ctxDone(ctx); err != nil {
		return false, fmt.Errorf("redisstore: Cancel of %d units of %q: nothing was sent, the units stay held: %w", r.n, r.key, err)
	}
	if !r.claim.CompareAndSwap(false, true) {
		return false, nil
	}
	rep, err := r.l.adjust(ctx, opName{"Cancel", -1, r.n}, opCancel, r.key, r.n, r.epoch, r.mark)
	return err == nil && rep.x == 1, err
}

// Settle adjusts the Reservation's units to the actual units the work
// used, actual ≥ 0, once (shared with Cancel across copies), as
// engine.Reservation's Settle does: fewer units go back to their sub-window
// under Cancel's rule, more are charged at now (Redis TIME) whatever the
// limit, a debt that later requests wait out (ChargeN). It returns the
// Decision a one-unit request would get now, recording nothing.
//
// Its errors wrap engine's: ErrNotReserved (no units held), ErrSettled
// (settled or cancelled before), ErrDebtFull (the debt does not fit the
// current sub-window; the units stay at n). A negative actual, or a debt
// above engine.MaxLimit, is an error that changes nothing, as is a ctx
// already done (nothing is sent). A round trip that fails wraps
// ErrNotApplied and leaves the Reservation settled.
func (r *Reservation) Settle(ctx context.Context, actual int64) (engine.Decision, error) {
	if r.n == 0 {
		return engine.Decision{}, r.settleErr(actual, engine.ErrNotReserved)
	}
	if r.claim == nil {
		return r.local.Settle(actual)
	}
	switch {
	case actual < 0:
		return engine.Decision{}, fmt.Errorf("redisstore: Settle(%d) on a reservation of %d units of %q: actual = %d, want ≥ 0 (the units the work used; 0 gives them all back)", actual, r.n, r.key, actual)
	case actual-r.n > engine.MaxLimit:
		return engine.Decision{}, fmt.Errorf("redisstore: Settle(%d) on a reservation of %d units of %q: the debt actual − units = %d is above engine.MaxLimit = %d", actual, r.n, r.key, actual-r.n, int64(engine.MaxLimit))
	}
	if err := ctxDone(ctx); err != nil {
		return engine.Decision{}, fmt.Errorf("redisstore: Settle(%d) on a reservation of %d units of %q: nothing was sent, the units stay held: %w", actual, r.n, r.key, err)
	}
	if !r.claim.CompareAndSwap(false, true) {
		return engine.Decision{}, r.settleErr(actual, engine.ErrSettled)
	}
	what := opName{"Settle", actual, r.n}
	switch {
	case actual < r.n:
		rep, err := r.l.adjust(ctx, what, opCancel, r.key, r.n-actual, r.epoch, r.mark)
		return rep.d, err
	case actual > r.n:
		rep, err := r.l.adjust(ctx, what, opCharge, r.key, actual-r.n, r.l.maxLimit, 0)
		if err == nil && rep.x == 0 {
			err = fmt.Errorf("redisstore: %s of %q, charging the debt of %d: %w", what, r.key, actual-r.n, engine.ErrDebtFull)
		}
		return rep.d, err
	}
	rep, err := r.l.adjust(ctx, what, opPeek, r.key, 0, 0, 0)
	return rep.d, err
}

func (r *Reservation) settleErr(actual int64, err error) error {
	return fmt.Errorf("redisstore: Settle(%d) on a reservation of %d units of %q: %w", actual, r.n, r.key, err)
}

// ChargeN records n units for key at now (Redis TIME) whatever the limit:
// the cost of work that was not reserved, known only afterwards, as
// engine.Engine's ChargeAt. The units count as admitted ones in the current
// sub-window, and may take the key past its limit: a debt that later
// requests wait out (no admission passes the limit). It creates the key
// when absent, and returns the Decision a one-unit request would get now,
// recording nothing; n = 0 records nothing.
//
// An error changes nothing: n outside 0 … engine.MaxLimit, a key longer
// than Config.MaxKeyBytes, a KeyLimit answer out of range, a hybrid
// limiter (ErrHybridReserve), a ctx already done, and ErrDebtFull (wrapped)
// when the current sub-window would count more than engine.MaxLimit (with
// SlidingWindow, than the key limit bound of New: Lua's exactness). A
// round trip that fails wraps ErrNotApplied; with FallbackLocal the local
// engine is charged then, for its decisions while Redis fails.
func (l *Limiter) ChargeN(ctx context.Context, key string, n int64) (engine.Decision, error) {
	switch {
	case l.hyb != nil:
		return engine.Decision{}, fmt.Errorf("redisstore: ChargeN(%q, %d): %w", key, n, ErrHybridReserve)
	case l.tb != nil:
		return engine.Decision{}, fmt.Errorf("redisstore: ChargeN(%q, %d): %w", key, n, ErrBucketReserve)
	case len(key) > l.norm.MaxKeyBytes:
		return engine.Decision{RetryAfter: engine.Never}, fmt.Errorf("redisstore: ChargeN: the key is %d bytes, longer than Config.MaxKeyBytes = %d; nothing was charged", len(key), l.norm.MaxKeyBytes)
	case n < 0 || n > engine.MaxLimit:
		return engine.Decision{}, fmt.Errorf("redisstore: ChargeN(%q, %d): n = %d, want 0 … %d (engine.MaxLimit)", key, n, n, int64(engine.MaxLimit))
	}
	limit, ok := l.limitOf(key)
	if !ok {
		return engine.Decision{Limit: limit, RetryAfter: engine.Never}, fmt.Errorf("redisstore: ChargeN(%q, %d): Config.KeyLimit returned %d, want 1 … %d; nothing was charged", key, n, limit, l.maxLimit)
	}
	if err := ctxDone(ctx); err != nil {
		return engine.Decision{Limit: limit}, fmt.Errorf("redisstore: ChargeN(%q, %d): nothing was sent: %w", key, n, err)
	}
	if n == 0 {
		rep, err := l.adjust(ctx, opName{"ChargeN", 0, -1}, opPeek, key, 0, 0, 0)
		return rep.d, err
	}
	rep, err := l.adjust(ctx, opName{"ChargeN", n, -1}, opCharge, key, n, l.maxLimit, 0)
	if err == nil && rep.x == 0 {
		err = fmt.Errorf("redisstore: ChargeN(%q, %d): %w", key, n, engine.ErrDebtFull)
	}
	return rep.d, err
}

// adjust runs op (opCancel, opCharge or opPeek) on key with n and x (see
// heldSource), for what, in its errors. A call that does not reach Redis
// or gets no reply is counted (CancelErrors or ChargeErrors, and Failures
// for a failed round trip), judged for the breaker, passed to the OnError
// hook and returned wrapping ErrNotApplied; FallbackLocal's engine is
// charged what a failed charge could not record.
func (l *Limiter) adjust(ctx context.Context, what opName, op, key string, n, x, mark int64) (heldReply, error) {
	limit, _ := l.limitOf(key)
	if err := l.breakerErr(ctx, key); err != nil {
		return heldReply{d: engine.Decision{Limit: limit}}, l.notApplied(what, op, key, n, err)
	}
	rep, err := l.held(ctx, op, key, n, limit, x, mark)
	if err != nil {
		l.judge(ctx, key, err)
		l.failures.Add(1)
		return heldReply{d: engine.Decision{Limit: limit}}, l.notApplied(what, op, key, n, mayHaveCounted(ctx, err))
	}
	return rep, nil
}

// opName names an operation in its errors, formatted only for one: its
// argument (−1: none) and the reservation's units (−1: none).
type opName struct {
	name      string
	arg, held int64
}

func (c opName) String() string {
	s := c.name
	if c.arg >= 0 {
		s += "(" + strconv.FormatInt(c.arg, 10) + ")"
	}
	if c.held >= 0 {
		s += " on a reservation of " + strconv.FormatInt(c.held, 10) + " units"
	}
	return s
}

// notApplied counts, reports and returns the failure cause of what: a
// Reservation's Cancel or Settle to at most its units in CancelErrors, a
// Settle to more and every ChargeN (n = 0 too) in ChargeErrors.
func (l *Limiter) notApplied(what opName, op, key string, n int64, cause error) error {
	switch {
	case op == opCharge:
		l.chargeErrors.Add(1)
		if l.local != nil {
			_, _ = l.local.Charge(key, n) // FallbackLocal decides while Redis fails: it counts the debt
		}
	case op == opCancel || what.held >= 0: // a cancel, or a settle's peek (Settle to equal units)
		l.cancelErrors.Add(1)
	default: // ChargeN(0)'s peek
		l.chargeErrors.Add(1)
	}
	err := fmt.Errorf("%w: %s of key %q: %w", ErrNotApplied, what, key, backendCause(cause))
	l.report(err)
	return err
}

// held makes one call of heldScript for key on the caller's goroutine.
func (l *Limiter) held(ctx context.Context, op, key string, n, limit, x, mark int64) (heldReply, error) {
	name := l.Key(key)
	keys := []string{name, name + resetSuffix}
	args := []any{op, n, limit, l.args[0], l.args[1], l.args[2], l.args[3], x, mark}
	l.sending()
	res, err := heldScript.EvalSha(ctx, l.client, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Only an explicit NOSCRIPT: the script did not run. A timeout
		// is never retried: the call may have been applied.
		l.noscript.Add(1)
		res, err = heldScript.Eval(ctx, l.client, keys, args...).Result()
	}
	if err != nil {
		return heldReply{}, err
	}
	l.answered()
	return parseHeld(res, limit)
}

// resetSuffix names a key's mark, its state's incarnation (heldSource):
// its state's name (Key) and this, outside the hash tag, so in the state's
// Cluster slot. The name predates the incarnations, and stays.
const resetSuffix = ":reset"

// resetState deletes key's state and sets a new mark, in one script
// call (resetSource): Reset's round trip.
func (l *Limiter) resetState(ctx context.Context, key string) error {
	name := l.Key(key)
	return resetScript.Run(ctx, l.client, []string{name, name + resetSuffix}, l.args[3]).Err()
}
