package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The prober for real: kill under load, the breaker opens, decisions are
// answered without round trips, restart, decisions return to Redis; the
// prober ends once the breaker closes. No timing is asserted (the outage
// command measures it).
func TestBreakerRecovers(t *testing.T) {
	s := redistest.Start(t)
	var hook hookCounter
	l := mustNew(t, client(t, s), engine.Config{Limit: 1_000_000, Window: time.Minute}, hook.opt(), WithFailurePolicy(FailOpen))
	var calls, ok, unavailable atomic.Int64
	stop := make(chan struct{})
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, err := l.AllowN(ctx, "k", 1)
				calls.Add(1)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrUnavailable) && d.Allowed:
					unavailable.Add(1)
				default:
					errc <- fmt.Errorf("%+v %v", d, err)
					return
				}
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		waitUntil(t, what, cond, func() any { return l.Stats() })
	}
	waitFor("decisions", func() bool { return ok.Load() > 100 })
	s.Kill()
	waitFor("the breaker to open", func() bool { return l.br.err() != nil })
	waitFor("policy answers", func() bool { return unavailable.Load() > 1000 })
	st := l.Stats()
	// Each failure is one round trip: a decision's that met the kill, or
	// a probe's. Far fewer than the decisions answered.
	if st.Failures > 50 || st.FallbackDecisions < 1000 {
		t.Fatalf("during the outage: %+v (hook %d)", st, hook.n.Load())
	}
	s.Start()
	before := ok.Load()
	waitFor("recovery", func() bool { return ok.Load() > before+100 })
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	st = l.Stats()
	if st.RedisDecisions+st.FallbackDecisions != uint64(calls.Load()) || st.RedisDecisions != uint64(ok.Load()) {
		t.Fatalf("decisions not accounted for: %+v, calls %d ok %d", st, calls.Load(), ok.Load())
	}
	// The prober ended with its success (Close would also end it).
	waitFor("the prober to end", func() bool { return !strings.Contains(stacks(), "redisstore.(*breaker)") })
	// Every failure reported once; compared once nothing runs (a probe
	// counts its failure just before it reports it).
	if st := l.Stats(); st.Failures != uint64(hook.n.Load()) {
		t.Fatalf("Failures %d, OnError calls %d", st.Failures, hook.n.Load())
	}
}

// Close while the breaker is open: the prober ends, no goroutine is left,
// and later decisions try Redis again (the breaker is off after Close).
func TestBreakerCloseWhileOpen(t *testing.T) {
	s := redistest.Start(t)
	l, err := New(client(t, s), engine.Config{Limit: 10, Window: time.Minute}, WithBreaker(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if _, err := l.AllowN(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	waitUntil(t, "failing probes", func() bool { return l.Stats().Failures >= 3 }, func() any { return l.Stats() })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	noneLeft(t)
	before := l.Stats()
	if _, err := l.AllowN(ctx, "k", 1); !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "breaker") {
		t.Fatalf("after Close: %v", err)
	}
	if st := l.Stats(); st.Failures != before.Failures+1 {
		t.Fatalf("after Close the decision made no round trip: %+v", st)
	}
	s.Start()
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("after Close and restart: %+v %v", d, err)
	}
}

// A probe in flight against a stalled server, which is then killed: the
// probe fails at the client's timeout and the breaker stays open; after
// the restart the next probe closes it.
func TestBreakerKilledDuringProbe(t *testing.T) {
	s := redistest.Start(t)
	l := mustNew(t, stallClient(t, s), engine.Config{Limit: 10, Window: time.Minute}, withManual())
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGSTOP)
	if _, err := l.AllowN(ctx, "k", 1); !errors.Is(err, ErrUnavailable) || l.br.err() == nil {
		t.Fatalf("a stalled server (300 ms ReadTimeout) did not open the breaker: %v", err)
	}
	done := make(chan bool)
	go func() { done <- l.br.probeOnce() }()
	time.Sleep(50 * time.Millisecond) // the probe is waiting for the stalled server
	s.Kill()
	if <-done || l.br.err() == nil {
		t.Fatal("a probe that met a stalled, then killed, server closed the breaker")
	}
	s.Start()
	if !l.br.probeOnce() {
		t.Fatalf("no recovery: %v", l.br.err())
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
}

// A flapping server: killed and restarted every few ms under load. Every
// decision is Redis's, the policy's (with ErrUnavailable), or, for a call
// whose connection the kill cut and whose confirmation found the server
// already restarted, ErrNoReply's; none of the last two admits, and each
// is counted once, in its own counter. Which of the three a call gets
// depends on how the kills fall against the callers, so only their sum is
// asserted. Each kill leaves the server down until the breaker is open (a
// correct limiter opens it within milliseconds: the dials are refused),
// so the breaker opens however slow the machine; in the end decisions
// return to Redis, and Close leaves no goroutine.
func TestBreakerFlapping(t *testing.T) {
	s := redistest.Start(t)
	l, err := New(client(t, s), engine.Config{Limit: 1_000_000, Window: time.Minute}, WithBreaker(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var calls, noReply atomic.Int64
	stop := make(chan struct{})
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				c := ctx
				var cancel context.CancelFunc = func() {}
				switch j % 3 {
				case 1:
					c, cancel = context.WithCancel(ctx)
					cancel() // already cancelled: answered before the breaker
				case 2:
					c, cancel = context.WithTimeout(ctx, time.Duration(1+i)*time.Millisecond)
				}
				d, err := l.AllowN(c, fmt.Sprint("k", i), 1)
				cancel()
				if j%3 == 1 {
					if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
						errc <- fmt.Errorf("cancelled: %+v %v", d, err)
						return
					}
					continue
				}
				if err != nil && !errors.Is(err, ErrUnavailable) && errors.Is(err, context.DeadlineExceeded) {
					continue // the deadline passed before the call: asks nothing, counted nowhere
				}
				calls.Add(1)
				switch unavailable, nr := errors.Is(err, ErrUnavailable), errors.Is(err, ErrNoReply); {
				case err == nil: // Redis's decision
				case unavailable && !nr && !d.Allowed: // the policy's (FailClosed)
				case nr && !unavailable && !d.Allowed: // its connection was cut, and Redis answered the confirmation
					noReply.Add(1)
				default:
					errc <- fmt.Errorf("%+v %v", d, err)
					return
				}
			}
		})
	}
	for range 8 {
		time.Sleep(30 * time.Millisecond)
		s.Kill()
		waitUntil(t, "breaker open while the server is down", func() bool { return l.br.err() != nil },
			func() any { return fmt.Sprintf("%+v\n%s", l.Stats(), stacks()) })
		time.Sleep(30 * time.Millisecond)
		s.Start()
	}
	before := l.Stats().RedisDecisions
	waitUntil(t, "recovery after the flapping", func() bool { return l.Stats().RedisDecisions >= before+50 },
		func() any { return fmt.Sprintf("%+v %v\n%s", l.Stats(), l.br.err(), stacks()) })
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.RedisDecisions+st.FallbackDecisions+st.NoReply != uint64(calls.Load()) || st.NoReply != uint64(noReply.Load()) || st.BreakerOpens == 0 {
		t.Fatalf("%+v, calls %d (ErrNoReply %d)", st, calls.Load(), noReply.Load())
	}
	t.Logf("%+v, ErrNoReply %d", st, noReply.Load())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	noneLeft(t)
}

// Close while a probe waits for a stalled server: Close cancels it and
// returns once go-redis gives the probe up (here the client's 300 ms
// ReadTimeout), and no goroutine is left.
func TestBreakerCloseDuringStalledProbe(t *testing.T) {
	s := redistest.Start(t)
	l, err := New(stallClient(t, s), engine.Config{Limit: 10, Window: time.Minute}, WithBreaker(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGSTOP)
	defer s.Signal(syscall.SIGCONT)
	if _, err := l.AllowN(ctx, "k", 1); !errors.Is(err, ErrUnavailable) || l.br.err() == nil {
		t.Fatalf("the stall did not open the breaker: %v", err)
	}
	waitUntil(t, "probe in flight", func() bool { return strings.Contains(stacks(), "(*Limiter).probeCall") }, func() any { return l.Stats() })
	done := make(chan error)
	go func() { done <- l.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Close did not return:\n%s", stacks())
	}
	noneLeft(t)
}

// A server that answers PING but cannot write (maxmemory reached, with
// noeviction): the decision's OOM opens the breaker, a probe (which
// writes) keeps it open while PING still answers, and once memory is
// available again the probe closes it.
func TestBreakerOOM(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute}, withManual())
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "OOM") || l.br.err() == nil {
		t.Fatalf("out of memory: %v (breaker %v)", err, l.br.err())
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if l.br.probeOnce() {
		t.Fatal("a probe closed the breaker on a server that cannot write")
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if !l.br.probeOnce() {
		t.Fatalf("no recovery: %v", l.br.err())
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed || d.Remaining != 8 {
		t.Fatalf("%+v %v", d, err)
	}
}

// Close racing decisions that fail and trip the breaker: no prober
// survives Close, whichever comes first.
func TestBreakerCloseRace(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	s.Kill()
	for range 20 {
		l, err := New(c, engine.Config{Limit: 10, Window: time.Minute}, WithBreaker(time.Millisecond, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				for range 5 {
					if _, err := l.AllowN(ctx, fmt.Sprint("k", i), 1); !errors.Is(err, ErrUnavailable) {
						t.Error(err)
					}
				}
			})
		}
		wg.Go(func() { _ = l.Close() })
		wg.Wait()
	}
	noneLeft(t)
}

// The server killed mid-run: each policy decides while it is down, and
// each of its answers comes with an error wrapping ErrUnavailable; every
// failure is counted and reported once; restarted on the same port, each
// limiter answers from Redis again (through NOSCRIPT: the new server has no
// script). The breaker is off, so that every decision tries Redis (the
// breaker's own tests are in outage_test.go).
func TestServerKilled(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Limit: 10, Window: time.Minute}
	var hookCalls atomic.Int64
	hook, off := WithOnError(func(error) { hookCalls.Add(1) }), WithBreaker(0, 0)
	closed := mustNew(t, client(t, s), cfg, hook, off)
	open := mustNew(t, client(t, s), cfg, hook, off, WithFailurePolicy(FailOpen))
	local := mustNew(t, client(t, s), cfg, hook, off, WithFallbackLocal(0.5))
	for _, l := range []*Limiter{closed, open, local} {
		if ok, err := l.Allow(ctx, "k"); !ok || err != nil {
			t.Fatalf("before the kill: %v %v", ok, err)
		}
	}
	s.Kill()

	d, err := closed.AllowN(ctx, "k", 1)
	if !errors.Is(err, ErrUnavailable) || d.Allowed || d.Reason() != engine.ReasonLimited || d.RetryAfter != 6*time.Second {
		t.Fatalf("FailClosed while down: %+v %v", d, err)
	}
	d, err = open.AllowN(ctx, "k", 1)
	if !errors.Is(err, ErrUnavailable) || !d.Allowed {
		t.Fatalf("FailOpen while down: %+v %v", d, err)
	}
	n := 0
	for range 10 {
		d, err := local.AllowN(ctx, "k", 1)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("FallbackLocal while down: %+v %v", d, err)
		}
		if d.Allowed {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("FallbackLocal(0.5) of 10 admitted %d while down, want 5", n)
	}
	if st := local.Stats(); st.Failures != 10 || st.FallbackDecisions != 10 || st.RedisDecisions != 1 {
		t.Fatalf("FallbackLocal stats %+v", st)
	}
	if got := hookCalls.Load(); got != 12 {
		t.Fatalf("OnError called %d times, want 12", got)
	}
	// A context already done asks nothing and returns its own error, even
	// when its deadline has passed and its timer has not fired yet.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []context.Context{cctx, staleDeadline{ctx}} {
		d, err := closed.AllowN(c, "k", 1)
		if err == nil || errors.Is(err, ErrUnavailable) || d.Allowed {
			t.Fatalf("done context: %+v %v", d, err)
		}
	}
	if st := closed.Stats(); st.Failures != 1 || st.FallbackDecisions != 1 {
		t.Fatalf("a done context was counted: %+v", st)
	}

	s.Start()
	for _, l := range []*Limiter{closed, open, local} {
		before := l.Stats()
		// The pool's connections died with the server: each call finds
		// at most one of them dead (MaxRetries -1), then dials anew.
		var err error
		for range 20 {
			if _, err = l.Allow(ctx, "k"); err == nil {
				break
			}
		}
		if st := l.Stats(); st.RedisDecisions != before.RedisDecisions+1 || err != nil {
			t.Fatalf("no recovery after restart: %+v (%v)", st, err)
		}
	}
}

// The policies' answers while Redis is down, each with ErrUnavailable:
// FailClosed denies with RetryAfter one sub-window (the window for
// FixedWindow); FailOpen admits; FallbackLocal, asked for n above its
// local share but within the key's limit, denies with RetryAfter one
// sub-window, not Never: the request is admittable by Redis once back
// (before the fix it said Never: n=50, Limit 100, share 0.25).
func TestFailurePolicyAnswersWhileDown(t *testing.T) {
	s := redistest.Start(t)
	fc := mustNew(t, client(t, s), engine.Config{Limit: 10, Window: 3 * time.Second, Algorithm: engine.FixedWindow})
	fo := mustNew(t, client(t, s), engine.Config{Limit: 10, Window: 3 * time.Second, SubWindows: 3}, WithFailurePolicy(FailOpen))
	fl := mustNew(t, client(t, s), engine.Config{Limit: 100, Window: time.Second}, WithFallbackLocal(0.25))
	s.Kill()
	t.Run("FailClosedAndFailOpen", func(t *testing.T) {
		for i := range 3 {
			d, err := fc.AllowN(context.Background(), "k", 1)
			if !errors.Is(err, ErrUnavailable) || d.Allowed || d.RetryAfter != 3*time.Second || d.Remaining != 0 {
				t.Errorf("FailClosed #%d: %+v %v", i, d, err)
			}
			d, err = fo.AllowN(context.Background(), "k", 1)
			if !errors.Is(err, ErrUnavailable) || !d.Allowed {
				t.Errorf("FailOpen #%d: %+v %v", i, d, err)
			}
		}
	})
	t.Run("FallbackLocalAdmittableIsNotNever", func(t *testing.T) {
		d, err := fl.AllowN(context.Background(), "k", 50)
		t.Logf("%+v %v reason %v", d, err, d.Reason())
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err %v", err)
		}
		if d.Allowed || d.RetryAfter != time.Second/10 {
			t.Errorf("policy answer for an admittable request (n=50 ≤ Limit 100) says %+v, want denied with RetryAfter one sub-window", d)
		}
	})
}
