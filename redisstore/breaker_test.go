package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

var errDown = errors.New("down")

// A manual breaker, step by step: only a successful probe closes it, and
// not one that a trip overlapped.
func TestBreakerSteps(t *testing.T) {
	var result error
	var during func()
	b := newBreaker(func(<-chan struct{}) error {
		if during != nil {
			during()
		}
		return result
	}, time.Millisecond, time.Second, true)
	if b.err() != nil {
		t.Fatal("a new breaker is open")
	}
	if !b.trip(errDown) || b.trip(errDown) {
		t.Fatal("trip should report that the first call opened it, and only the first")
	}
	if err := b.err(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, errDown) {
		t.Fatalf("err() = %v, want it to wrap ErrUnavailable and the cause", err)
	}
	result = errDown
	if b.probeOnce() || b.err() == nil {
		t.Fatal("a failed probe closed the breaker")
	}
	result, during = nil, func() { b.trip(errDown) }
	if b.probeOnce() || b.err() == nil {
		t.Fatal("a probe that a trip overlapped closed the breaker")
	}
	during = nil
	if !b.probeOnce() || b.err() != nil {
		t.Fatal("a successful probe did not close the breaker")
	}
	b.stop()
}

// The prober goroutine probes at doubling intervals, closes the breaker on
// the first success and ends; stop ends one that is still probing.
func TestBreakerProber(t *testing.T) {
	calls := make(chan time.Time, 16)
	fail := make(chan bool, 16)
	b := newBreaker(func(<-chan struct{}) error {
		calls <- time.Now()
		if <-fail {
			return errDown
		}
		return nil
	}, 2*time.Millisecond, 8*time.Millisecond, false)
	start := time.Now()
	b.trip(errDown)
	var at []time.Duration
	for _, f := range []bool{true, true, true, true, false} {
		fail <- f
		at = append(at, (<-calls).Sub(start))
	}
	b.wg.Wait() // the prober ends after its success
	if b.err() != nil {
		t.Fatal("still open after a successful probe")
	}
	// Waits of 2, 4, 8 and 8 ms (capped): probes at ≥ 2, 6, 14, 22, 30 ms.
	for i, want := range []time.Duration{2, 6, 14, 22, 30} {
		if at[i] < want*time.Millisecond {
			t.Fatalf("probe %d at %v, before %v ms: %v", i, at[i], want, at)
		}
	}
	b.trip(errDown)
	fail <- true
	<-calls
	b.stop() // waits for the goroutine
	if b.err() == nil {
		t.Fatal("stop changed the state")
	}
	if b.trip(errDown) {
		t.Fatal("the breaker was open")
	}
	select {
	case <-calls:
		t.Fatal("a probe after stop")
	case <-time.After(20 * time.Millisecond): // longer than the first wait (2 ms)
	}
}

// The plain breaker, step by step with the prober driven by the test: the
// first failure opens it; later decisions are the policy's with no round
// trip (no failure counted, no OnError call); a probe against the dead
// server fails, is counted and keeps it open; after the restart one probe
// closes it (through NOSCRIPT: the new server has no script) and decisions
// are Redis's again. The probe writes only its own key.
func TestPlainBreakerSteps(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	var hook hookCounter
	cfg := engine.Config{Limit: 10, Window: time.Minute}
	l := mustNew(t, c, cfg, withManual(), hook.opt())
	if d, err := l.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
		t.Fatalf("before the kill: %+v %v", d, err)
	}
	s.Kill()

	d, err := l.AllowN(ctx, "k", 1)
	if !errors.Is(err, ErrUnavailable) || d.Allowed || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("first decision after the kill: %+v %v", d, err)
	}
	if st := l.Stats(); st.Failures != 1 || st.BreakerOpens != 1 || hook.n.Load() != 1 {
		t.Fatalf("after the first failure: %+v, hook %d", st, hook.n.Load())
	}
	for i := range 50 {
		d, err := l.AllowN(ctx, fmt.Sprint("k", i%3), 1)
		if !errors.Is(err, ErrUnavailable) || d.Allowed || d.RetryAfter != 6*time.Second || !strings.Contains(err.Error(), "breaker is open") {
			t.Fatalf("decision %d while open: %+v %v", i, d, err)
		}
	}
	// A context already done is answered before the breaker, with its own
	// error, and counted nowhere.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.AllowN(cctx, "k", 1); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Failures != 1 || st.FallbackDecisions != 51 || st.RedisDecisions != 1 || st.BreakerOpens != 1 || hook.n.Load() != 1 {
		t.Fatalf("decisions while open made round trips: %+v, hook %d", st, hook.n.Load())
	}
	if l.br.probeOnce() || l.br.err() == nil {
		t.Fatal("a probe against a dead server closed the breaker")
	}
	if st := l.Stats(); st.Failures != 2 || hook.n.Load() != 2 {
		t.Fatalf("the failed probe was not counted: %+v, hook %d", st, hook.n.Load())
	}
	if _, err := l.AllowN(ctx, "k", 1); !strings.Contains(fmt.Sprint(err), "last probe failed") {
		t.Fatalf("while open after a probe: %v", err)
	}

	s.Start() // empty, on the same port
	if !l.br.probeOnce() || l.br.err() != nil {
		t.Fatalf("the probe did not close the breaker after the restart: %+v", l.Stats())
	}
	if st := l.Stats(); st.NoScript != 2 { // the first decision's, the probe's
		t.Fatalf("the probe should have met NOSCRIPT on the new server: %+v", st)
	}
	for i := range 12 {
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil || d.Allowed != (i < 10) {
			t.Fatalf("step %d after recovery: %+v %v", i, d, err)
		}
	}
	if got := storedUnits(t, c, l, "k"); got != 10 {
		t.Fatalf("Redis holds %d units for k, want 10: the probe must not touch user keys", got)
	}
	if n, err := c.Exists(ctx, l.probeName("k")).Result(); err != nil || n != 1 {
		t.Fatalf("the probe key %q: %d %v", l.probeName("k"), n, err)
	}
	if ttl, err := c.PTTL(ctx, l.probeName("k")).Result(); err != nil || ttl <= 0 || ttl > cfg.Window+cfg.Window/10 {
		t.Fatalf("the probe key's TTL: %v %v", ttl, err)
	}
}

// What a failed round trip shows (liveness.go), judged step by step on a
// healthy server behind a proxy: WRONGTYPE, a call never sent and a
// caller's cancellation on which go-redis gave up show nothing (a call
// never sent once opened the breaker: never again, since at most its
// deadline raises a suspicion that a confirmation judges); an error
// reply or a refused connection opens the breaker at once, whatever the
// caller's context; a caller's deadline is a suspicion only when round
// trips have gone unanswered for suspectAfter; a suspicion, and a timeout
// of the client's own, start a confirmation, and on a server that answers
// (within confirmBudget, here 50 ms late) its verdict is that Redis is up:
// the breaker stays closed.
func TestBreakerWhatTrips(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute}, withManual())
	if err := c.Set(ctx, l.Key("str"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "str", 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("WRONGTYPE: %v", err)
	}
	if st := l.Stats(); st.BreakerOpens != 0 || l.br.err() != nil {
		t.Fatalf("WRONGTYPE opened the breaker: %+v", st)
	}

	p.delay.Store(int64(50 * time.Millisecond))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	dctx, dcancel := context.WithTimeout(ctx, time.Nanosecond)
	defer dcancel()
	<-dctx.Done()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded} // a timeout of the client's own
	g := int64(suspectAfter)
	nothing := func(what string, cx context.Context, err error) {
		t.Helper()
		if v := l.judge(cx, "k", err); v != nil || l.br.conf != nil || l.br.err() != nil {
			t.Fatalf("%s: judged as evidence against Redis (verdict %v, breaker %v)", what, v, l.br.err())
		}
	}
	l.pending.Store(1) // unanswered since the limiter began
	nothing("a cancellation go-redis gave up on", cctx, context.Canceled)
	nothing("a call never sent", cctx, fmt.Errorf("%w: %w", errAbandoned, context.Canceled))
	nothing("a call never sent, its deadline passed", dctx, fmt.Errorf("%w: %w", errAbandoned, context.DeadlineExceeded))
	l.pending.Store(l.since() + 1 - g + int64(time.Millisecond)) // unanswered for just under suspectAfter
	nothing("a deadline, round trips unanswered for less than suspectAfter", dctx, context.DeadlineExceeded)
	nothing("a stale deadline, the same", staleDeadline{ctx}, fmt.Errorf("i/o timeout: %w", context.DeadlineExceeded))
	if st := l.Stats(); st.BreakerOpens != 0 {
		t.Fatalf("%+v", st)
	}

	// Proofs open it at once, whatever the caller's context.
	reply := c.Do(ctx, "NOSUCHCOMMAND").Err() // an error reply
	if reply == nil {
		t.Fatal("no error reply")
	}
	for _, err := range []error{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), reply} {
		v := l.judge(cctx, "k", err)
		if v == nil || l.br.err() == nil {
			t.Fatalf("%v with a cancelled context did not open the breaker", err)
		}
		if down, ok := v.wait(nil); !ok || down == nil {
			t.Fatalf("%v: the verdict is not an outage: %v", err, down)
		}
		if !l.br.probeOnce() {
			t.Fatal("the probe did not close the breaker")
		}
	}
	if l.pending.Load() != 0 {
		t.Fatal("the probes' replies did not end the unanswered span")
	}

	// Suspicions start a confirmation, which finds Redis up: a deadline
	// with round trips unanswered for suspectAfter, and a timeout of the
	// client's own with the caller still waiting.
	for _, tc := range []struct {
		what string
		cx   context.Context
		err  error
	}{
		{"a deadline, round trips unanswered for suspectAfter", dctx, context.DeadlineExceeded},
		{"a timeout of the client's own", ctx, timeout},
		{"a cancelled caller's round trip, then the client's own timeout", cctx, timeout},
		{"a connection lost mid-call", ctx, io.EOF},
		{"a call never sent, its deadline passed while round trips went unanswered", dctx, fmt.Errorf("%w: %w", errAbandoned, context.DeadlineExceeded)},
	} {
		l.pending.Store(l.since() + 1 - g)
		v := l.judge(tc.cx, "k", tc.err)
		if v == nil {
			t.Fatalf("%s: not a suspicion", tc.what)
		}
		if down, ok := v.wait(nil); !ok || down != nil || l.br.err() != nil {
			t.Fatalf("%s: the confirmation found a server that answers (50 ms late) down: %v", tc.what, down)
		}
	}
	if st := l.Stats(); st.BreakerOpens != 2 {
		t.Fatalf("only the two proofs open the breaker: %+v", st)
	}

	// For real: every reply held 50 ms, a caller with a 20 ms deadline,
	// and round trips unanswered for twice suspectAfter (set so, rather
	// than waited for): the caller is answered as gone (its deadline
	// passed first), the round trip is a suspicion, and Redis answers
	// the confirmation: nothing opens.
	l.pending.Store(l.since() + 1 - 2*g)
	tctx, tcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer tcancel()
	if d, err := l.AllowN(tctx, "k", 1); d.Allowed || errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %+v, %v", d, err)
	}
	if v := l.br.suspect(); v != nil {
		v.wait(nil)
	}
	if st := l.Stats(); st.BreakerOpens != 2 || l.br.err() != nil {
		t.Fatalf("a reply 50 ms late opened the breaker: %+v", st)
	}
}

// A policy answer's error never wraps a context's error (README "The
// failure policy"): the breaker's, whatever its cause, and a probe's.
func TestTripErrorWrapsNoContextError(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded} // as net's dial timeout: it matches DeadlineExceeded
	for _, cause := range []error{dial, fmt.Errorf("batch: %w", context.Canceled), context.DeadlineExceeded} {
		b := newBreaker(func(<-chan struct{}) error { return cause }, time.Millisecond, time.Millisecond, true)
		b.trip(cause)
		errs := []error{b.err()}
		b.probeOnce()
		errs = append(errs, b.err(), newTripError(cause))
		for _, err := range errs {
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				t.Errorf("cause %v: the answer's error %v matches a context's error, or not ErrUnavailable", cause, err)
			}
			if !strings.Contains(err.Error(), cause.Error()) {
				t.Errorf("the answer's error %q lost its cause's text %q", err, cause)
			}
		}
		b.stop()
	}
}
