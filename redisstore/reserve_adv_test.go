package redisstore

// Adversarial tests of Reserve, Cancel, Settle and ChargeN through Redis
// (issue 31, "Through Redis"). Each test names the sentence of the docs it
// holds the implementation to.

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// docs/design.md §12, "A cancel": "a state created afresh under a monotonic
// TIME has l ≥ x + N + 1, which the condition refuses", and the invariant
// "a count never drops below what is live ... no admission passes the limit
// because of a cancel". A redis-server restarted without persistence (the
// helpers' servers persist nothing; a crash of a cache-configured Redis)
// creates the key's state afresh within the same sub-window, with no reset
// mark: a reservation held across the restart then cancels into the fresh
// count, which takes other, live reservations' units.
func TestAdvCancelAcrossRestartTakesFreshUnits(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	// Two sub-windows of 30 s: the restart stays inside one sub-window.
	l := mustNew(t, c, engine.Config{Limit: 2, Window: time.Minute, SubWindows: 2, Algorithm: engine.SlidingWindowStrict})
	old, err := l.Reserve(ctx, "k", 1)
	if err != nil || old.Units() != 1 {
		t.Fatal(old, err)
	}
	s.Kill()
	s.Start()
	waitUntil(t, "a reconnect", func() bool { return c.Ping(ctx).Err() == nil }, func() any { return nil })
	waitUntil(t, "the breaker closed", func() bool { _, err := l.AllowN(ctx, "probe", 0); return err == nil }, func() any { return l.Stats() })
	// Two live reservations fill the fresh count to the limit.
	for i := range 2 {
		r, err := l.Reserve(ctx, "k", 1)
		if err != nil || !r.Decision().Allowed {
			t.Fatalf("fresh reservation %d: %+v %v", i, r.Decision(), err)
		}
	}
	ok, err := old.Cancel(ctx)
	third, err2 := l.Reserve(ctx, "k", 1)
	if err != nil || err2 != nil {
		t.Fatal(err, err2)
	}
	if ok || third.Decision().Allowed {
		t.Fatalf("a reservation from before the restart cancelled into the fresh count (Cancel %v), and a third request was admitted (%v) while 2 live reservations hold the limit of 2", ok, third.Decision().Allowed)
	}
}

// Reservation.Settle: "A negative actual, or a debt above engine.MaxLimit,
// is an error that changes nothing"; engine's SettleAt: "is an error that
// changes nothing". So the claim is kept: a later Cancel returns the units.
func TestAdvSettleBadActualKeepsClaim(t *testing.T) {
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
func TestAdvDoneContextNeverStealsClaim(t *testing.T) {
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
func TestAdvBadSettleNeverStealsClaim(t *testing.T) {
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
// KeyLimit answer that changed meanwhile (Policies.Swap), to a new limit or
// to one out of range, must not lose the refund: either the units go back,
// or the call is an error that keeps the claim.
func TestAdvKeyLimitChangeBeforeCancelAndSettle(t *testing.T) {
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

// Reservation: "A Reservation that FallbackLocal admitted while Redis
// failed holds its units in the local engine, and is cancelled or settled
// there" (design §12: "never to Redis, where nothing was recorded"), also
// once Redis is back.
func TestAdvFallbackReservationCancelledLocallyAfterRecovery(t *testing.T) {
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
func TestAdvCancelStalledReportedNeverResent(t *testing.T) {
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

// Limiter.Reset: "A Reservation from before the Reset gives nothing back to
// the fresh count (its Cancel reports false)"; README: "A settle to more
// still charges the difference." Settle to fewer after a Reset must not
// refund into the fresh count either, on every algorithm.
func TestAdvResetThenSettleFewerNoRefund(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: alg}, WithPrefix("rs:"+alg.String()+":"))
		before, _ := l.Reserve(ctx, "k", 5)
		debt, _ := l.Reserve(ctx, "k", 1)
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		fresh, _ := l.Reserve(ctx, "k", 4)
		if before.Units() != 5 || fresh.Units() != 4 || debt.Units() != 1 {
			t.Fatal(before.Decision(), fresh.Decision())
		}
		if _, err := before.Settle(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := storedUnits(t, c, l, "k"); got != 4 {
			t.Fatalf("%v: Settle(0) of a reservation from before the Reset: Redis holds %d, want the fresh 4", alg, got)
		}
		if _, err := debt.Settle(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if got := storedUnits(t, c, l, "k"); got != 6 {
			t.Fatalf("%v: Settle(3) of 1 from before the Reset: Redis holds %d, want 4 + the debt of 2", alg, got)
		}
	}
}

// README: "`FailOpen`'s admissions hold nothing"; ReserveN: "(a refusal, a
// FailOpen admission) it is nil". A FailOpen admission recorded nothing in
// Redis, so its Cancel or Settle, after Redis is back, must not take units
// from Redis's count (that would be a false admission).
func TestAdvFailOpenReservationGivesNothingBack(t *testing.T) {
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

// AllowN: "A request that can never be admitted is refused at once,
// without a round trip": n < 0, n above the key's limit. Reservation.Units:
// "n when it was Allowed with n ≥ 1, else 0"; Settle: ErrNotReserved.
func TestAdvReserveHugeAndNegativeHoldNothing(t *testing.T) {
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

// docs/design.md §12, "Debts": "with SlidingWindowStrict a debt charged in
// sub-window e is waited out when the window no longer holds e, within
// Window plus one sub-window": so the key's state must live that long after
// a Settle to more, and not expire on the TTL the reservation set.
func TestAdvSettleDebtRenewsTTL(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const window = 2 * time.Second
	l := mustNew(t, c, engine.Config{Limit: 10, Window: window, SubWindows: 2, Algorithm: engine.SlidingWindowStrict})
	r, _ := l.Reserve(ctx, "k", 1)
	if r.Units() != 1 {
		t.Fatal(r.Decision())
	}
	time.Sleep(1200 * time.Millisecond) // setup: the settle comes later than the reservation
	if _, err := r.Settle(ctx, 500); err != nil {
		t.Fatal(err)
	}
	ttl, err := c.PTTL(ctx, l.Key("k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < window {
		t.Fatalf("the key's TTL after a debt: %v, want ≥ Window %v: the debt would be forgotten before it is waited out", ttl, window)
	}
}

// ErrNotApplied: "Each is counted in Stats().CancelErrors or
// Stats().ChargeErrors and passed to the OnError hook"; "Such a call is
// never sent again". Replicas reserve, cancel and settle while the server
// is killed and restarted under them: every failed cancel or settle wraps
// ErrNotApplied, each is counted exactly once (CancelErrors), and a
// reservation whose Cancel failed never reports true later.
func TestAdvKillUnderLoadCountsEveryFailure(t *testing.T) {
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
func TestAdvCancelDeadlineInFlight(t *testing.T) {
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

// Reservation.Settle lists its errors (ErrNotReserved, ErrSettled,
// ErrDebtFull, a negative actual, a debt above MaxLimit, a done ctx,
// ErrNotApplied); a KeyLimit answer that turned out of range between the
// reservation and its settle is none of them. The debt must then be
// charged, or the call must be an error that keeps the claim, so that the
// cost is not silently lost (design §12: a charge not recorded lets later
// requests be admitted by that many more).
func TestAdvKeyLimitOutOfRangeBeforeSettleMore(t *testing.T) {
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

// design §12, "Debts": with SlidingWindow a charge is refused whole past
// (2^53 − 1) / width_ns; README: "A charge the current sub-window cannot
// count is refused whole"; engine's SettleAt: ErrDebtFull "leaves the
// reservation settled at its n units". At the bound exactly the debt is
// counted, and the key then refuses with a finite RetryAfter (a debt is
// waited out within Window plus one sub-window).
func TestAdvSettleAtTheWeightedBound(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	cfg := engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindow}
	l := mustNew(t, c, cfg)
	capN := l.maxLimit
	width := cfg.Window / 10
	over, _ := l.Reserve(ctx, "over", 1)
	if _, err := over.Settle(ctx, capN+1); !errors.Is(err, engine.ErrDebtFull) {
		t.Fatalf("Settle(%d) of 1 (the sub-window would hold %d > %d): %v, want ErrDebtFull", capN+1, capN+1, capN, err)
	}
	if got := storedUnits(t, c, l, "over"); got != 1 {
		t.Fatalf("after a refused debt Redis holds %d, want 1", got)
	}
	if ok, err := over.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel after ErrDebtFull: %v %v, want false (settled at its n units)", ok, err)
	}
	at, _ := l.Reserve(ctx, "at", 1)
	d, err := at.Settle(ctx, capN)
	if err != nil {
		t.Fatalf("Settle(%d) of 1, the bound exactly: %v", capN, err)
	}
	if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > cfg.Window+width {
		t.Fatalf("Decision after a debt of %d: %+v, want a refusal waited out within Window + one sub-window", capN-1, d)
	}
	if got := storedUnits(t, c, l, "at"); got != capN {
		t.Fatalf("Redis holds %d, want %d", got, capN)
	}
	if d, err := l.AllowN(ctx, "at", 1); err != nil || d.Allowed {
		t.Fatalf("AllowN after the debt: %+v %v", d, err)
	}
	if _, err := l.ChargeN(ctx, "at", 1); !errors.Is(err, engine.ErrDebtFull) {
		t.Fatalf("ChargeN(1) past the bound: %v, want ErrDebtFull", err)
	}
}

// Limiter.Reset "Cluster-safe", a reservation from before it gives nothing
// back; in a Cluster, on keys of every node.
func TestAdvClusterResetThenCancel(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes), MaxRetries: -1})
	defer cc.Close()
	l := mustNew(t, cc, engine.Config{Limit: 6, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	for i := range 30 {
		k := "k" + string(rune('a'+i%26)) + string(rune('0'+i/26))
		before, err := l.Reserve(ctx, k, 4)
		if err != nil || before.Units() != 4 {
			t.Fatalf("%q: %+v %v", k, before.Decision(), err)
		}
		if err := l.Reset(ctx, k); err != nil {
			t.Fatalf("%q: Reset: %v", k, err)
		}
		fresh, err := l.Reserve(ctx, k, 5)
		if err != nil || fresh.Units() != 5 {
			t.Fatalf("%q: %+v %v", k, fresh.Decision(), err)
		}
		if ok, err := before.Cancel(ctx); ok || err != nil {
			t.Fatalf("%q: Cancel from before the Reset: %v %v, want false", k, ok, err)
		}
		if d, err := l.AllowN(ctx, k, 2); err != nil || d.Allowed {
			t.Fatalf("%q: 5 live of 6, a request of 2: %+v %v, want refused", k, d, err)
		}
	}
}

// ErrNotApplied: "Each is counted in Stats().CancelErrors or
// Stats().ChargeErrors and passed to the OnError hook". A Settle to exactly
// the reserved units that cannot reach Redis either succeeds (nothing to
// change) or is such an error: counted in one of the two, and reported once.
func TestAdvSettleEqualWithRedisDownIsCounted(t *testing.T) {
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
func TestAdvSettleDebtChargedLocallyWhenRedisDown(t *testing.T) {
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

// Reservation.Cancel returns false and changes nothing "when the
// sub-window has left the key's window (the key's newest sub-window is N+1
// or more after it; FixedWindow: a later window)"; Settle to fewer follows
// Cancel's rule. Once Redis's grid has moved past it, a cancel and a
// settle of the old units must leave a fresh reservation's count alone, on
// every algorithm.
func TestAdvCancelAfterWindowLeavesFreshCount(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		cfg := engine.Config{Limit: 100, Window: 20 * time.Millisecond, SubWindows: 2, Algorithm: alg}
		span := time.Duration(3) * 10 * time.Millisecond
		if alg == engine.FixedWindow {
			cfg.SubWindows, span = 0, 20*time.Millisecond
		}
		l := mustNew(t, c, cfg, WithPrefix("aw:"+alg.String()+":"))
		old, _ := l.Reserve(ctx, "k", 7)
		old2, _ := l.Reserve(ctx, "k", 5)
		if old.Units() != 7 || old2.Units() != 5 {
			t.Fatal(old.Decision(), old2.Decision())
		}
		for { // setup: reserve until Redis's grid is past the old sub-window's window
			r, err := l.Reserve(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Units() == 1 && r.At().Sub(old.At()) >= span {
				break // r holds the fresh sub-window's unit
			}
			if r.Units() == 1 {
				_, _ = r.Cancel(ctx)
			}
		}
		before := storedUnits(t, c, l, "k")
		ok, err := old.Cancel(ctx)
		_, serr := old2.Settle(ctx, 0)
		if ok || err != nil || serr != nil {
			t.Fatalf("%v: Cancel of a sub-window out of the window: %v %v; Settle(0): %v", alg, ok, err, serr)
		}
		if after := storedUnits(t, c, l, "k"); after != before {
			t.Fatalf("%v: a cancel of units out of the window changed Redis's count from %d to %d", alg, before, after)
		}
	}
}
