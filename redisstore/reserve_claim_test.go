package redisstore

// A Reservation's claim: calls that change nothing (bad input, a done
// context, a key limit out of range) keep it for a later Cancel or Settle.

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Reservation.Settle: "A negative actual, or a debt above engine.MaxLimit,
// is an error that changes nothing"; engine's SettleAt: "is an error that
// changes nothing". So the claim is kept: a later Cancel returns the units.
func TestSettleBadActualKeepsClaim(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	for _, actual := range []int64{-1, math.MinInt64, math.MaxInt64, engine.MaxLimit + 4} {
		r, err := l.Reserve(ctx, "k", 3)
		if err != nil || r.Units() != 3 {
			t.Fatal(r, err)
		}
		if _, err := r.Settle(ctx, actual); err == nil {
			t.Fatalf("Settle(%d): no error", actual)
		}
		if ok, err := r.Cancel(ctx); !ok || err != nil {
			t.Fatalf("Cancel after Settle(%d) failed with an error that changes nothing: %v %v, want true", actual, ok, err)
		}
		if got := storedUnits(t, c, l, "k"); got != 0 {
			t.Fatalf("after Settle(%d) and Cancel: Redis holds %d units, want 0", actual, got)
		}
	}
	if st := l.Stats(); st.CancelErrors != 0 || st.ChargeErrors != 0 {
		t.Fatalf("Stats: %+v: an input error is no failure of Redis", st)
	}
}

// Reservation.Cancel: "A ctx already done sends nothing and returns its
// error: the units stay held, for a later Cancel"; design §12: "A context
// already done sends nothing and keeps nothing claimed." A copy cancelled
// on a live context, racing a copy whose context is done, must therefore
// always return the units: the done one cannot take the claim from it.
func TestDoneContextKeepsClaim(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	done := canceled()
	for i := range 300 {
		r, err := l.Reserve(ctx, "k", 1)
		if err != nil || r.Units() != 1 {
			t.Fatal(r, err)
		}
		cp := r
		var wg sync.WaitGroup
		var live bool
		var liveErr error
		wg.Go(func() {
			if i%2 == 0 {
				_, _ = r.Cancel(done)
			} else {
				_, _ = r.Settle(done, 0)
			}
		})
		wg.Go(func() { live, liveErr = cp.Cancel(ctx) })
		wg.Wait()
		if !live || liveErr != nil {
			t.Fatalf("iteration %d: the live Cancel lost to a copy on a done context: %v %v", i, live, liveErr)
		}
	}
	if got := storedUnits(t, c, l, "k"); got != 0 {
		t.Fatalf("Redis holds %d units after every cancel, want 0", got)
	}
}

// The same race with a Settle whose input is refused (a negative actual):
// "an error that changes nothing", so the live Cancel beside it returns the
// units.
func TestBadSettleKeepsClaim(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	for i := range 300 {
		r, err := l.Reserve(ctx, "k", 1)
		if err != nil || r.Units() != 1 {
			t.Fatal(r, err)
		}
		cp := r
		var wg sync.WaitGroup
		var live bool
		wg.Go(func() { _, _ = r.Settle(ctx, -1) })
		wg.Go(func() { live, _ = cp.Cancel(ctx) })
		wg.Wait()
		if !live {
			t.Fatalf("iteration %d: the Cancel lost to a Settle(-1) that should change nothing", i)
		}
	}
	if got := storedUnits(t, c, l, "k"); got != 0 {
		t.Fatalf("Redis holds %d units, want 0", got)
	}
}

// Reservation.Cancel's contract has no condition on KeyLimit: it "returns
// the Reservation's units to the sub-window they were recorded in" unless
// nothing is held, it was settled, or the sub-window left the window.
// Settle: "fewer units go back to their sub-window under Cancel's rule". A
// KeyLimit answer that changed meanwhile (Tiers.Swap), to a new limit or
// to one out of range, must not lose the refund: either the units go back,
// or the call is an error that keeps the claim.
func TestKeyLimitChangeBeforeCancelAndSettle(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	var lim atomic.Int64
	lim.Store(10)
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 10, Window: time.Minute, Algorithm: alg, KeyLimit: func(string) int64 { return lim.Load() }}
			l := mustNew(t, c, cfg, WithPrefix("kl:"+alg.String()+":"))
			for _, changed := range []int64{4, -1, engine.MaxLimit + 1} {
				lim.Store(10)
				r1, _ := l.Reserve(ctx, "k", 6)
				r2, _ := l.Reserve(ctx, "k", 3)
				if r1.Units() != 6 || r2.Units() != 3 {
					t.Fatal(r1.Decision(), r2.Decision())
				}
				lim.Store(changed)
				ok, cerr := r1.Cancel(ctx)
				d, serr := r2.Settle(ctx, 1)
				lim.Store(10)
				if !ok {
					if cerr == nil {
						t.Errorf("KeyLimit %d: Cancel reported false with no error: the refund of 6 units is lost", changed)
					} else if ok2, err := r1.Cancel(ctx); !ok2 {
						t.Errorf("KeyLimit %d: Cancel failed (%v) and a later Cancel did not return the units (%v)", changed, cerr, err)
					}
				}
				if serr != nil {
					if _, err := r2.Settle(ctx, 1); err != nil {
						t.Errorf("KeyLimit %d: Settle(1) failed (%v) and consumed the claim: a later Settle: %v", changed, serr, err)
					}
				} else if changed == 4 && d.Limit != 4 {
					t.Errorf("KeyLimit 4: Settle's Decision %+v, want Limit 4", d)
				}
				if got := storedUnits(t, c, l, "k"); got != 1 {
					t.Errorf("KeyLimit %d between reserve and cancel/settle: Redis holds %d units, want 1 (6 cancelled, 3 settled to 1)", changed, got)
				}
				_ = l.Reset(ctx, "k")
			}
		})
	}
}

// Reservation.Settle lists its errors (ErrNotReserved, ErrSettled,
// ErrDebtFull, a negative actual, a debt above MaxLimit, a done ctx,
// ErrNotApplied); a KeyLimit answer that turned out of range between the
// reservation and its settle is none of them. The debt must then be
// charged, or the call must be an error that keeps the claim, so that the
// cost is not silently lost (design §12: a charge not recorded lets later
// requests be admitted by that many more).
func TestKeyLimitOutOfRangeBeforeSettleMore(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	var lim atomic.Int64
	lim.Store(10)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict, KeyLimit: func(string) int64 { return lim.Load() }})
	for _, bad := range []int64{-1, engine.MaxLimit + 1} {
		_ = l.Reset(ctx, "k")
		r, _ := l.Reserve(ctx, "k", 3)
		if r.Units() != 3 {
			t.Fatal(r.Decision())
		}
		lim.Store(bad)
		_, err := r.Settle(ctx, 8)
		lim.Store(10)
		if err != nil {
			if _, err2 := r.Settle(ctx, 8); err2 != nil {
				t.Errorf("KeyLimit %d: Settle(8) of 3 failed (%v) and consumed the claim (%v): the debt of 5 is lost; Stats %+v", bad, err, err2, l.Stats())
				continue
			}
		}
		if got := storedUnits(t, c, l, "k"); got != 8 {
			t.Errorf("KeyLimit %d: Redis holds %d after Settle(8) of 3, want 8", bad, got)
		}
	}
}

// AllowN: "A request that can never be admitted is refused at once,
// without a round trip": n < 0, n above the key's limit. Reservation.Units:
// "n when it was Allowed with n ≥ 1, else 0"; Settle: ErrNotReserved.
func TestReserveHugeAndNegativeHoldNothing(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	for _, n := range []int64{-1, math.MinInt64, 11, engine.MaxLimit, engine.MaxLimit + 1, MaxExact, MaxExact + 1, math.MaxInt64} {
		r, err := l.Reserve(ctx, "k", n)
		if err != nil || r.Decision().Allowed || r.Units() != 0 || r.Decision().RetryAfter != engine.Never {
			t.Fatalf("Reserve(%d): %+v units %d %v", n, r.Decision(), r.Units(), err)
		}
		if ok, err := r.Cancel(ctx); ok || err != nil {
			t.Fatalf("Cancel of Reserve(%d): %v %v", n, ok, err)
		}
		if _, err := r.Settle(ctx, 5); !errors.Is(err, engine.ErrNotReserved) {
			t.Fatalf("Settle of Reserve(%d): %v, want ErrNotReserved", n, err)
		}
		if _, err := l.ChargeN(ctx, "k", n); (n < 0 || n > engine.MaxLimit) == (err == nil) {
			t.Fatalf("ChargeN(%d): %v", n, err)
		}
		_ = l.Reset(ctx, "k")
	}
	if st := l.Stats(); st.RedisDecisions != 0 {
		t.Fatalf("Stats %+v: refusals made a round trip", st)
	}
}
