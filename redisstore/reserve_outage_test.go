package redisstore

// Reservations while Redis fails: every Cancel, Settle and ChargeN that
// Redis did not apply is counted, reported and never resent; the failure
// policies' reservations are held (or not) where they were made.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Reservation: "A Reservation that FallbackLocal admitted while Redis
// failed holds its units in the local engine, and is cancelled or settled
// there" (design §12: "never to Redis, where nothing was recorded"), also
// once Redis is back.
func TestFallbackReservationCancelledLocallyAfterRecovery(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	cfg := engine.Config{Limit: 10, Window: time.Minute, SubWindows: 2, Algorithm: engine.SlidingWindowStrict}
	l := mustNew(t, c, cfg, WithFallbackLocal(1), WithBreaker(time.Millisecond, 5*time.Millisecond))
	s.Kill()
	local, err := l.Reserve(ctx, "k", 4)
	if !errors.Is(err, ErrUnavailable) || local.Units() != 4 {
		t.Fatalf("Reserve with Redis down: %+v %v", local.Decision(), err)
	}
	settled, err := l.Reserve(ctx, "k", 4)
	if !errors.Is(err, ErrUnavailable) || settled.Units() != 4 {
		t.Fatalf("Reserve with Redis down: %+v %v", settled.Decision(), err)
	}
	s.Start()
	waitUntil(t, "Redis deciding again", func() bool { _, err := l.AllowN(ctx, "probe", 0); return err == nil }, func() any { return l.Stats() })
	held, err := l.Reserve(ctx, "k", 5) // in Redis
	if err != nil || held.Units() != 5 {
		t.Fatalf("Reserve in Redis: %+v %v", held.Decision(), err)
	}
	if ok, err := local.Cancel(ctx); !ok || err != nil {
		t.Fatalf("Cancel of the local reservation after recovery: %v %v", ok, err)
	}
	if _, err := settled.Settle(ctx, 1); err != nil {
		t.Fatalf("Settle of the local reservation after recovery: %v", err)
	}
	if got := storedUnits(t, c, l, "k"); got != 5 {
		t.Fatalf("Redis holds %d units, want the 5 reserved there: a local reservation was given back to Redis", got)
	}
	if d := l.local.AllowN("k", 0); d.Remaining != 9 {
		t.Fatalf("local engine: %+v, want 1 unit (4 cancelled, 4 settled to 1)", d)
	}
}

// Reservation.Cancel: "A round trip that fails is not sent again; its error
// wraps ErrNotApplied"; ErrNotApplied: "a caller whose context ended while
// it was in flight ... counted in Stats().CancelErrors". A cancel stuck on
// a stalled server is reported once and never resent: after the server
// resumes, Redis holds either the units or none, never less.
func TestCancelStalledReportedNeverResent(t *testing.T) {
	s := redistest.Start(t)
	c := stallClient(t, s)
	var hook hookLog
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, hook.opt())
	a, _ := l.Reserve(ctx, "k", 3)
	b, _ := l.Reserve(ctx, "k", 2)
	more, _ := l.Reserve(ctx, "k", 1)
	if a.Units() != 3 || b.Units() != 2 || more.Units() != 1 {
		t.Fatal(a.Decision(), b.Decision(), more.Decision())
	}
	resume := stall(t, s)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	ok, err := a.Cancel(cctx)
	cancel()
	_, serr := more.Settle(ctx, 4) // a debt, on a silent server
	resume()
	if ok || !errors.Is(err, ErrNotApplied) || !errors.Is(serr, ErrNotApplied) {
		t.Fatalf("Cancel on a stalled server: %v %v; Settle: %v; want ErrNotApplied", ok, err, serr)
	}
	// Redis deciding again, after any confirmation the stall started has
	// ended (one may still conclude, on a loaded machine, after a first
	// probe got its reply, and open the breaker for b's Cancel below).
	resumed := time.Now()
	waitUntil(t, "Redis deciding again", func() bool {
		_, err := l.AllowN(ctx, "probe", 0)
		return err == nil && time.Since(resumed) > 2*time.Second
	}, func() any { return l.Stats() })
	if ok, err := a.Cancel(ctx); ok || err != nil {
		t.Fatalf("a second Cancel: %v %v, want false, nil", ok, err)
	}
	if st := l.Stats(); st.CancelErrors != 1 || st.ChargeErrors != 1 {
		t.Fatalf("Stats %+v, want CancelErrors 1 and ChargeErrors 1", st)
	}
	got := storedUnits(t, c, l, "k")
	// a's 3 units were given back or not; more's debt of 3 was charged or not.
	if got != 6 && got != 3 && got != 9 && got != 6-3+3 {
		t.Fatalf("Redis holds %d units: neither applied nor not", got)
	}
	if ok, err := b.Cancel(ctx); !ok || err != nil {
		t.Fatalf("b's Cancel: %v %v", ok, err)
	}
	if after := storedUnits(t, c, l, "k"); after != got-2 {
		t.Fatalf("b's Cancel took %d units, want 2", got-after)
	}
}

// README: "`FailOpen`'s admissions hold nothing"; ReserveN: "(a refusal, a
// FailOpen admission) it is nil". A FailOpen admission recorded nothing in
// Redis, so its Cancel or Settle, after Redis is back, must not take units
// from Redis's count (that would be a false admission).
func TestFailOpenReservationGivesNothingBack(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, SubWindows: 2, Algorithm: engine.SlidingWindowStrict},
		WithFailurePolicy(FailOpen), WithBreaker(time.Millisecond, 5*time.Millisecond))
	s.Kill()
	open1, err := l.Reserve(ctx, "k", 4)
	open2, _ := l.Reserve(ctx, "k", 3)
	if !errors.Is(err, ErrUnavailable) || !open1.Decision().Allowed {
		t.Fatalf("Reserve with Redis down, FailOpen: %+v %v", open1.Decision(), err)
	}
	if d, settle, err := l.ReserveN(ctx, "k", 2); !d.Allowed || settle != nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ReserveN, FailOpen: %+v settle nil %v %v", d, settle == nil, err)
	}
	s.Start()
	waitUntil(t, "Redis deciding again", func() bool { _, err := l.AllowN(ctx, "probe", 0); return err == nil }, func() any { return l.Stats() })
	held, err := l.Reserve(ctx, "k", 9)
	if err != nil || held.Units() != 9 {
		t.Fatalf("Reserve in Redis: %+v %v", held.Decision(), err)
	}
	ok, err := open1.Cancel(ctx)
	_, serr := open2.Settle(ctx, 0)
	if got := storedUnits(t, c, l, "k"); got != 9 {
		t.Fatalf("Redis holds %d units, want 9: a FailOpen admission (Cancel %v %v, Settle(0) %v) gave back units it never recorded", got, ok, err, serr)
	}
	if ok {
		t.Fatalf("Cancel of a FailOpen admission reported true (Units %d)", open1.Units())
	}
}

// ErrNotApplied: "Each is counted in Stats().CancelErrors or
// Stats().ChargeErrors and passed to the OnError hook". A Settle to exactly
// the reserved units that cannot reach Redis changes nothing but loses its
// Decision: it wraps ErrNotApplied, counts in CancelErrors (Stats), and is
// reported once; ChargeN(0), the same peek, counts in ChargeErrors.
func TestSettleEqualWithRedisDownIsCounted(t *testing.T) {
	s := redistest.Start(t)
	var hook hookLog
	l := mustNew(t, client(t, s), engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, hook.opt())
	r, _ := l.Reserve(ctx, "k", 3)
	if r.Units() != 3 {
		t.Fatal(r.Decision())
	}
	s.Kill()
	if _, err := r.Settle(ctx, 3); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("Settle(3) of 3 with Redis down: %v, want ErrNotApplied", err)
	}
	if st := l.Stats(); st.CancelErrors != 1 || st.ChargeErrors != 0 || hook.count(ErrNotApplied) != 1 {
		t.Fatalf("Settle(3) of 3 with Redis down: Stats has CancelErrors %d, ChargeErrors %d and OnError got %d ErrNotApplied; want 1, 0, 1", st.CancelErrors, st.ChargeErrors, hook.count(ErrNotApplied))
	}
	if _, err := l.ChargeN(ctx, "k", 0); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("ChargeN(0) with Redis down: %v, want ErrNotApplied", err)
	}
	if st := l.Stats(); st.CancelErrors != 1 || st.ChargeErrors != 1 || hook.count(ErrNotApplied) != 2 {
		t.Fatalf("ChargeN(0) with Redis down: Stats has CancelErrors %d, ChargeErrors %d and OnError got %d ErrNotApplied; want 1, 1, 2", st.CancelErrors, st.ChargeErrors, hook.count(ErrNotApplied))
	}
}

// README, FallbackLocal: "a charge Redis did not record is charged to the
// local engine, so that its decisions count it"; ChargeN: "with
// FallbackLocal the local engine is charged then". A Settle to more is a
// charge of the difference (Settle: "more are charged at now ... (ChargeN)"):
// when Redis cannot record it, the local engine must count it too.
func TestSettleDebtChargedLocallyWhenRedisDown(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, client(t, s), engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithFallbackLocal(1))
	r, _ := l.Reserve(ctx, "k", 2)
	if r.Units() != 2 {
		t.Fatal(r.Decision())
	}
	s.Kill()
	if _, err := l.ChargeN(ctx, "k", 1); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("ChargeN with Redis down: %v", err)
	}
	if d := l.local.AllowN("k", 0); d.Remaining != 9 {
		t.Fatalf("local engine after ChargeN(1): %+v, want 1 unit", d)
	}
	if _, err := r.Settle(ctx, 8); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("Settle(8) of 2 with Redis down: %v, want ErrNotApplied", err)
	}
	if d := l.local.AllowN("k", 0); d.Remaining != 3 {
		t.Fatalf("local engine after Settle(8) of 2 failed in Redis: %+v, want 1 + the debt of 6 counted (Remaining 3): the local decisions ignore the debt", d)
	}
}
