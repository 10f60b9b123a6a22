package redisstore

// Reservations against the window: Resets, TTLs, the weighted bound, and
// sub-windows that left the window.

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Limiter.Reset: "A Reservation from before the Reset gives nothing back to
// the fresh count (its Cancel reports false)"; README: "A settle to more
// still charges the difference." Settle to fewer after a Reset must not
// refund into the fresh count either, on every algorithm.
func TestResetThenSettleFewerNoRefund(t *testing.T) {
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

// docs/design.md §12, "Debts": "with SlidingWindowStrict a debt charged in
// sub-window e is waited out when the window no longer holds e, within
// Window plus one sub-window": so the key's state must live that long after
// a Settle to more, and not expire on the TTL the reservation set.
func TestSettleDebtRenewsTTL(t *testing.T) {
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

// design §12, "Debts": with SlidingWindow a charge is refused whole past
// (2^53 − 1) / width_ns; README: "A charge the current sub-window cannot
// count is refused whole"; engine's SettleAt: ErrDebtFull "leaves the
// reservation settled at its n units". At the bound exactly the debt is
// counted, and the key then refuses with a finite RetryAfter (a debt is
// waited out within Window plus one sub-window).
func TestSettleAtTheWeightedBound(t *testing.T) {
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

// Reservation.Cancel returns false and changes nothing "when the
// sub-window has left the key's window (the key's newest sub-window is N+1
// or more after it; FixedWindow: a later window)"; Settle to fewer follows
// Cancel's rule. Once Redis's grid has moved past it, a cancel and a
// settle of the old units must leave a fresh reservation's count alone, on
// every algorithm. The window is 20 ms, so that Redis's grid moves past it
// soon; the key's state then expires 30 ms after its last write, which a
// process short of CPU can outlast between two calls. So the state and
// its mark lose their TTL (PERSIST) before the count is read, and a setup
// in which the state expired anyway (another incarnation: the cancel would
// change nothing for that reason instead) starts again.
func TestCancelAfterWindowLeavesFreshCount(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		cfg := engine.Config{Limit: 100, Window: 20 * time.Millisecond, SubWindows: 2, Algorithm: alg}
		span := time.Duration(3) * 10 * time.Millisecond
		if alg == engine.FixedWindow {
			cfg.SubWindows, span = 0, 20*time.Millisecond
		}
		l := mustNew(t, c, cfg, WithPrefix("aw:"+alg.String()+":"))
		old, old2 := setupOutOfWindow(t, c, l, span)
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

// setupOutOfWindow reserves 7 and 5 units of "k", then single units until
// Redis's grid is span past the second, and makes the key's state and
// mark permanent, all in one incarnation of the state; it starts again
// when the state expired meanwhile.
func setupOutOfWindow(t *testing.T, c redis.UniversalClient, l *Limiter, span time.Duration) (old, old2 Reservation) {
	t.Helper()
	for attempt := 0; attempt < 100; attempt++ {
		old, _ = l.Reserve(ctx, "k", 7)
		old2, _ = l.Reserve(ctx, "k", 5)
		if old.Units() != 7 || old2.Units() != 5 {
			t.Fatal(old.Decision(), old2.Decision())
		}
		for {
			r, err := l.Reserve(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			// old2 may have landed a sub-window after old (a boundary
			// between the two, under load): both must be out.
			if r.Units() == 1 && r.At().Sub(old2.At()) >= span {
				break // r holds the fresh sub-window's unit
			}
			if r.Units() == 1 {
				_, _ = r.Cancel(ctx)
			}
		}
		pipe := c.Pipeline()
		p1, p2 := pipe.Persist(ctx, l.Key("k")), pipe.Persist(ctx, l.Key("k")+resetSuffix)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		mark, err := c.Get(ctx, l.Key("k")+resetSuffix).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if p1.Val() && p2.Val() && old.mark == mark && old2.mark == mark {
			return old, old2
		}
		t.Logf("attempt %d: the state expired during the setup (a process short of CPU); again", attempt)
	}
	t.Fatal("the state expired during every setup")
	return old, old2
}

// Limiter.Reset "Cluster-safe", a reservation from before it gives nothing
// back; in a Cluster, on keys of every node.
func TestClusterResetThenCancel(t *testing.T) {
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

// design §12: "a key's state expires one Window plus one sub-window after
// its last write, when x has left the window"; SlidingWindowStrict counts
// a unit of sub-window x until the window no longer holds x, that is in
// sub-windows x … x+N. With a sub-window that is not a whole number of
// milliseconds (allowed: whole microseconds), a TTL rounded to the
// millisecond must not let the state expire while x still counts. The
// verdict is on Redis's grid: with Limit 1, the next admission after one
// in sub-window x is in sub-window x+N+1 or later.
func TestStrictStateOutlivesItsWindow(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	for _, tc := range []struct {
		window time.Duration
		n      int
	}{{3 * time.Millisecond, 2}, {2500 * time.Microsecond, 5}, {4500 * time.Microsecond, 3}, {1500 * time.Microsecond, 1}} {
		cfg := engine.Config{Limit: 1, Window: tc.window, SubWindows: tc.n, Algorithm: engine.SlidingWindowStrict}
		l := mustNew(t, c, cfg, WithPrefix("ttl:"+tc.window.String()+":"))
		width := tc.window / time.Duration(tc.n)
		var last time.Time
		early := 0
		for admitted := 0; admitted < 100; {
			r, err := l.Reserve(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Units() == 0 {
				continue
			}
			if !last.IsZero() && r.At().Sub(last) < time.Duration(tc.n+1)*width {
				early++
				t.Errorf("window %v, N %d: admitted in the sub-window at %v, %v after the one at %v, which still counts (want ≥ %v)",
					tc.window, tc.n, r.At().Format("15:04:05.000000"), r.At().Sub(last), last.Format("15:04:05.000000"), time.Duration(tc.n+1)*width)
				if early > 3 {
					t.FailNow()
				}
			}
			last = r.At()
			admitted++
		}
	}
}
