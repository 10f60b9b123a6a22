package redisstore

// Reservations while Redis fails: every Cancel, Settle and ChargeN that
// Redis did not apply is counted, reported and never resent; the failure
// policies' reservations are held (or not) where they were made.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	waitUntil(t, "Redis deciding again", func() bool { _, err := l.AllowN(ctx, "probe", 0); return err == nil }, func() any { return l.Stats() })
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
		WithPolicy(FailOpen), WithBreaker(time.Millisecond, 5*time.Millisecond))
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
// Stats().ChargeErrors and passed to the OnError hook"; "Such a call is
// never sent again". Replicas reserve, cancel and settle while the server
// is killed and restarted under them: every failed cancel or settle wraps
// ErrNotApplied, each is counted exactly once (CancelErrors), and a
// reservation whose Cancel failed never reports true later.
func TestReserveKillUnderLoadCountsEveryFailure(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Limit: 40, Window: time.Minute, SubWindows: 2, Algorithm: engine.SlidingWindowStrict}
	type replica struct {
		l                   *Limiter
		hook                *hookLog
		cancelErr, settleUp atomic.Int64
	}
	var reps []*replica
	for range 3 {
		h := &hookLog{}
		reps = append(reps, &replica{l: mustNew(t, newClient(t, s, time.Second), cfg, h.opt(), WithBreaker(time.Millisecond, 5*time.Millisecond)), hook: h})
	}
	var stop atomic.Bool
	errc := make(chan error, 64)
	var wg sync.WaitGroup
	for i, rp := range reps {
		for g := range 3 {
			wg.Go(func() {
				for k := 0; !stop.Load(); k++ {
					r, err := rp.l.Reserve(ctx, "t", 1)
					if r.Units() == 0 {
						if err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrNoReply) {
							errc <- err
							return
						}
						time.Sleep(100 * time.Microsecond)
						continue
					}
					time.Sleep(2 * time.Millisecond) // held across the kill, now and then
					if (i+g+k)%3 == 0 {
						_, err := r.Settle(ctx, 0) // fewer: a give-back, as Cancel
						if err != nil {
							if !errors.Is(err, ErrNotApplied) {
								errc <- err
								return
							}
							rp.cancelErr.Add(1)
						}
						continue
					}
					_, err = r.Cancel(ctx)
					if err != nil {
						if !errors.Is(err, ErrNotApplied) {
							errc <- err
							return
						}
						rp.cancelErr.Add(1)
						if ok2, err2 := r.Cancel(ctx); ok2 || err2 != nil {
							errc <- errors.Join(errors.New("a failed Cancel was sent again"), err2)
							return
						}
					}
				}
			})
		}
	}
	time.Sleep(150 * time.Millisecond)
	s.Kill()
	time.Sleep(100 * time.Millisecond)
	s.Start()
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	var failures int64
	for i, rp := range reps {
		st := rp.l.Stats()
		if int64(st.CancelErrors) != rp.cancelErr.Load() || int64(st.ChargeErrors) != rp.settleUp.Load() {
			t.Errorf("replica %d: Stats CancelErrors %d ChargeErrors %d, callers saw %d and %d", i, st.CancelErrors, st.ChargeErrors, rp.cancelErr.Load(), rp.settleUp.Load())
		}
		if got := int64(rp.hook.count(ErrNotApplied)); got != rp.cancelErr.Load()+rp.settleUp.Load() {
			t.Errorf("replica %d: OnError got %d ErrNotApplied, callers saw %d", i, got, rp.cancelErr.Load()+rp.settleUp.Load())
		}
		failures += rp.cancelErr.Load() + rp.settleUp.Load()
	}
	t.Logf("failed cancels and settles: %d", failures)
	if failures == 0 {
		t.Fatal("the run did not hold units across the kill")
	}
}

// ErrNotApplied: "a caller whose context ended while it was in flight";
// with ContextTimeoutEnabled the round trip ends at ctx's deadline. The
// cancel and the settle are reported and counted once, never resent.
func TestCancelDeadlineInFlight(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, ReadTimeout: 5 * time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	var hook hookLog
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, hook.opt())
	a, _ := l.Reserve(ctx, "k", 3)
	b, _ := l.Reserve(ctx, "k", 2)
	if a.Units() != 3 || b.Units() != 2 {
		t.Fatal(a.Decision(), b.Decision())
	}
	resume := stall(t, s)
	c1, cancel1 := context.WithTimeout(ctx, 30*time.Millisecond)
	ok, err := a.Cancel(c1)
	cancel1()
	c2, cancel2 := context.WithTimeout(ctx, 30*time.Millisecond)
	_, serr := b.Settle(c2, 7)
	cancel2()
	resume()
	if ok || !errors.Is(err, ErrNotApplied) || !errors.Is(serr, ErrNotApplied) {
		t.Fatalf("Cancel with ctx ending in flight: %v %v; Settle: %v; want ErrNotApplied", ok, err, serr)
	}
	if st := l.Stats(); st.CancelErrors != 1 || st.ChargeErrors != 1 {
		t.Fatalf("Stats %+v, want CancelErrors 1, ChargeErrors 1", st)
	}
	if n := hook.count(ErrNotApplied); n != 2 {
		t.Fatalf("OnError got %d ErrNotApplied, want 2", n)
	}
	if ok, err := a.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel again: %v %v", ok, err)
	}
	if _, err := b.Settle(ctx, 7); !errors.Is(err, engine.ErrSettled) {
		t.Fatalf("Settle again: %v, want ErrSettled", err)
	}
}

// ErrNotApplied: "Each is counted in Stats().CancelErrors or
// Stats().ChargeErrors and passed to the OnError hook". A Settle to exactly
// the reserved units that cannot reach Redis either succeeds (nothing to
// change) or is such an error: counted in one of the two, and reported once.
func TestSettleEqualWithRedisDownIsCounted(t *testing.T) {
	s := redistest.Start(t)
	var hook hookLog
	l := mustNew(t, client(t, s), engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, hook.opt())
	r, _ := l.Reserve(ctx, "k", 3)
	if r.Units() != 3 {
		t.Fatal(r.Decision())
	}
	s.Kill()
	_, err := r.Settle(ctx, 3)
	st := l.Stats()
	if err == nil {
		return
	}
	if !errors.Is(err, ErrNotApplied) {
		t.Fatalf("Settle(3) of 3 with Redis down: %v, want nil or ErrNotApplied", err)
	}
	if st.CancelErrors+st.ChargeErrors != 1 || hook.count(ErrNotApplied) != 1 {
		t.Fatalf("Settle(3) of 3 with Redis down returned %v, but Stats has CancelErrors %d + ChargeErrors %d and OnError got %d ErrNotApplied; want 1 each", err, st.CancelErrors, st.ChargeErrors, hook.count(ErrNotApplied))
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
