package redisstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A Reservation settles or cancels once, across copies: a second Cancel
// and a Cancel after Settle report false, a Settle after either is
// ErrSettled, and Redis holds the units the first call left.
func TestReserveOnceAcrossCopies(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	r, err := l.Reserve(ctx, "k", 4)
	if err != nil || !r.Decision().Allowed || r.Units() != 4 {
		t.Fatalf("Reserve: %+v %v", r, err)
	}
	cp := r
	if _, err := cp.Settle(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := storedUnits(t, c, l, "k"); got != 1 {
		t.Fatalf("after Settle(1) of 4: Redis holds %d units, want 1", got)
	}
	if ok, err := r.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel after a copy's Settle: %v %v, want false, nil", ok, err)
	}
	if _, err := r.Settle(ctx, 0); !errors.Is(err, engine.ErrSettled) {
		t.Fatalf("a second Settle: %v, want ErrSettled", err)
	}
	if got := storedUnits(t, c, l, "k"); got != 1 {
		t.Fatalf("after the refused calls: Redis holds %d units, want 1", got)
	}
	var zero Reservation
	if _, err := zero.Settle(ctx, 1); !errors.Is(err, engine.ErrNotReserved) {
		t.Fatalf("Settle on the zero Reservation: %v, want ErrNotReserved", err)
	}
	if ok, err := zero.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel on the zero Reservation: %v %v", ok, err)
	}
	d, err := l.Reserve(ctx, "k", 20) // above the limit: refused at once, nothing to settle
	if err != nil || d.Decision().Allowed || d.Units() != 0 {
		t.Fatalf("Reserve above the limit: %+v %v", d, err)
	}
	if _, err := d.Settle(ctx, 3); !errors.Is(err, engine.ErrNotReserved) {
		t.Fatalf("Settle of a refusal: %v, want ErrNotReserved", err)
	}
}

// A cancel whose sub-window has left the window changes nothing, though
// the key's state still holds the sub-window's count (no later write
// moved it): the units no longer count, and another reservation's units,
// recorded later in the same slot position, are never touched.
func TestCancelAfterSubWindowLeft(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const sub = 40 * time.Millisecond
	l := mustNew(t, c, engine.Config{Limit: 10, Window: 4 * sub, SubWindows: 4, Algorithm: engine.SlidingWindowStrict})
	r, err := l.Reserve(ctx, "k", 3)
	if err != nil || r.Units() != 3 {
		t.Fatal(r, err)
	}
	// The state would expire about when x leaves the window; kept, so that
	// the check below sees what Cancel did (a late wake on a loaded
	// machine found it expired, 0).
	if err := c.Persist(ctx, l.Key("k")).Err(); err != nil {
		t.Fatal(err)
	}
	// The window at sub-window x+4 still counts x; x+5's does not.
	time.Sleep(time.Until(r.At().Add(5 * sub)))
	if ok, err := r.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel after the sub-window left: %v %v, want false", ok, err)
	}
	if got := storedUnits(t, c, l, "k"); got != 3 {
		t.Fatalf("the state's count of the old sub-window: %d, want 3 (untouched)", got)
	}
	// A Settle to more still charges the debt at now.
	r2, _ := l.Reserve(ctx, "k", 2)
	time.Sleep(time.Until(r2.At().Add(5 * sub)))
	d, err := r2.Settle(ctx, 12)
	if err != nil || d.Allowed || d.Remaining != 0 {
		t.Fatalf("Settle(12) of 2 after the sub-window left: %+v %v, want the debt of 10 to refuse", d, err)
	}
}

// ChargeN refuses a debt the current sub-window cannot count
// (ErrDebtFull), charges nothing then, and refuses bad input by name.
func TestChargeBounds(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.ChargeN(ctx, "k", engine.MaxLimit); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ChargeN(ctx, "k", 1); !errors.Is(err, engine.ErrDebtFull) {
		t.Fatalf("a charge past MaxLimit in one sub-window: %v, want ErrDebtFull", err)
	}
	if got := storedUnits(t, c, l, "k"); got != engine.MaxLimit {
		t.Fatalf("stored %d, want MaxLimit", got)
	}
	r, _ := l.Reserve(ctx, "j", 1)
	if _, err := l.ChargeN(ctx, "j", engine.MaxLimit-1); err != nil { // with the reserved unit: MaxLimit
		t.Fatal(err)
	}
	if _, err := r.Settle(ctx, 2); !errors.Is(err, engine.ErrDebtFull) {
		t.Fatalf("a settle past MaxLimit: %v, want ErrDebtFull", err)
	}
	for _, n := range []int64{-1, engine.MaxLimit + 1} {
		if _, err := l.ChargeN(ctx, "k", n); err == nil {
			t.Errorf("ChargeN(%d): no error", n)
		}
	}
	if _, err := r.Settle(ctx, -1); err == nil {
		t.Error("Settle(-1): no error")
	}
	weighted := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindow})
	if _, err := weighted.ChargeN(ctx, "w", weighted.maxLimit+1); !errors.Is(err, engine.ErrDebtFull) {
		t.Fatalf("SlidingWindow: a charge past the exactness bound %d: %v, want ErrDebtFull", weighted.maxLimit, err)
	}
}

// ReserveN's SettleFunc after an admission of 0 units (nothing reserved)
// charges what the work used, as the adapters expect; a refusal returns
// no SettleFunc.
func TestReserveNZeroCharges(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	d, settle, err := l.ReserveN(ctx, "k", 0)
	if err != nil || !d.Allowed || settle == nil {
		t.Fatalf("ReserveN(0): %+v %v (settle nil: %v)", d, err, settle == nil)
	}
	if d, err := settle(ctx, 12); err != nil || d.Allowed {
		t.Fatalf("settle(12) after ReserveN(0): %+v %v, want the debt to refuse", d, err)
	}
	if got := storedUnits(t, c, l, "k"); got != 12 {
		t.Fatalf("stored %d, want 12", got)
	}
	if d, settle, err := l.ReserveN(ctx, "k", 1); err != nil || d.Allowed || settle != nil {
		t.Fatalf("ReserveN refused: %+v %v (settle nil: %v)", d, err, settle == nil)
	}
}

// A value at the key that is not this limiter's state is left alone: a
// cancel, a settle and a charge fail with Redis's WRONGTYPE, wrapped in
// ErrNotApplied, and are counted.
func TestHeldForeignValue(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	r, err := l.Reserve(ctx, "k", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, l.Key("k"), "not a state", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Cancel(ctx); ok || !errors.Is(err, ErrNotApplied) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Cancel over a foreign value: %v %v", ok, err)
	}
	if _, err := l.ChargeN(ctx, "k", 1); !errors.Is(err, ErrNotApplied) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("ChargeN over a foreign value: %v", err)
	}
	if v, _ := c.Get(ctx, l.Key("k")).Result(); v != "not a state" {
		t.Fatalf("the foreign value was changed: %q", v)
	}
	if st := l.Stats(); st.CancelErrors != 1 || st.ChargeErrors != 1 {
		t.Fatalf("Stats %+v", st)
	}
}

// A reservation from before a Reset gives nothing back to the fresh count,
// as the engine's: its Cancel reports false and a Settle to fewer units
// returns nothing, while one to more charges the difference to the fresh
// count; reservations after the Reset (which read the new mark) cancel as
// usual, also after a second Reset's mark has come and gone.
func TestReserveAcrossReset(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	before, _ := l.Reserve(ctx, "k", 3)
	before2, _ := l.Reserve(ctx, "k", 3)
	before3, _ := l.Reserve(ctx, "k", 2)
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	after, err := l.Reserve(ctx, "k", 2)
	if err != nil || after.Units() != 2 {
		t.Fatal(after, err)
	}
	if ok, err := before.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel of a reservation from before the Reset: %v %v, want false", ok, err)
	}
	if _, err := before2.Settle(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := storedUnits(t, c, l, "k"); got != 2 {
		t.Fatalf("after the old reservations' give-backs: the fresh count is %d, want 2 (untouched)", got)
	}
	if _, err := before3.Settle(ctx, 5); err != nil { // 3 more than its 2: charged to the fresh count
		t.Fatal(err)
	}
	if got := storedUnits(t, c, l, "k"); got != 5 {
		t.Fatalf("after a settle to more: %d, want 2 + 3", got)
	}
	if ok, err := after.Cancel(ctx); !ok || err != nil {
		t.Fatalf("Cancel of a reservation after the Reset: %v %v, want true", ok, err)
	}
	if got := storedUnits(t, c, l, "k"); got != 3 {
		t.Fatalf("after its cancel: %d, want 3", got)
	}
	// The mark lives as long as a reservation that read it may count:
	// its TTL is renewed by each such reservation.
	ttl := c.PTTL(ctx, l.Key("k")+resetSuffix).Val()
	cfg := l.Config()
	if lease := cfg.Window + cfg.Window/time.Duration(cfg.SubWindows); ttl <= lease-time.Second || ttl > lease {
		t.Fatalf("the reset mark's TTL %v, want about Window plus one sub-window", ttl)
	}
}
