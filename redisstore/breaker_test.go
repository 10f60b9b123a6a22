package redisstore

import (
	"context"
	"errors"
	"fmt"
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

// Failures that must not open the breaker: WRONGTYPE at one key, and the
// caller's own cancellation during the call. A caller's deadline opens it
// only when no round trip succeeded while that call was in flight.
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

	p.delay.Store(int64(200 * time.Millisecond))
	// A cancellation (go-redis notices it only while dialing, waiting for
	// a connection or backing off; the fail path is the same) never opens
	// it, even with round trips unanswered for long. The deadline rule,
	// at its edge: round trips unanswered for less than deadlineGrace keep
	// it closed; for deadlineGrace, it opens.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	timeout := fmt.Errorf("i/o timeout: %w", context.DeadlineExceeded)
	g := int64(deadlineGrace)
	l.pending.Store(1) // unanswered since the limiter began
	l.tripOn(cctx, "k", context.Canceled)
	l.tripOn(cctx, "k", timeout)
	l.tripOn(cctx, "k", fmt.Errorf("%w: %w", errAbandoned, context.Canceled)) // never sent, cancelled
	if st := l.Stats(); st.BreakerOpens != 0 || l.br.err() != nil {
		t.Fatalf("a caller's cancellation opened the breaker: %+v", st)
	}
	// Unless the error shows Redis failing whatever the context: a
	// refused connection, an error reply.
	reply := c.Do(ctx, "NOSUCHCOMMAND").Err() // an error reply
	if reply == nil {
		t.Fatal("no error reply")
	}
	for _, err := range []error{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), reply} {
		l.tripOn(cctx, "k", err)
		if l.br.err() == nil {
			t.Fatalf("%v with a cancelled context did not open the breaker", err)
		}
		if !l.br.probeOnce() {
			t.Fatal("the probe did not close the breaker")
		}
	}
	if l.pending.Load() != 0 {
		t.Fatal("the probes' replies did not end the unanswered span")
	}
	dctx, dcancel := context.WithTimeout(ctx, time.Nanosecond)
	defer dcancel()
	<-dctx.Done()
	l.tripOn(dctx, "k", timeout)
	if l.br.err() != nil {
		t.Fatal("a deadline opened the breaker with no round trip unanswered")
	}
	l.pending.Store(l.since() + 1 - g + int64(time.Millisecond)) // unanswered for just under deadlineGrace
	l.tripOn(dctx, "k", timeout)
	l.tripOn(staleDeadline{ctx}, "k", timeout)
	if l.br.err() != nil {
		t.Fatal("a deadline opened the breaker with round trips unanswered for less than deadlineGrace")
	}
	l.pending.Store(l.since() + 1 - g)
	l.tripOn(dctx, "k", timeout)
	if l.br.err() == nil {
		t.Fatal("a deadline with round trips unanswered for deadlineGrace did not open the breaker")
	}
	if !l.br.probeOnce() {
		t.Fatal("the probe (200 ms behind the proxy, within its 500 ms) did not close the breaker")
	}

	// For real: every reply held 200 ms, a 20 ms deadline, and round
	// trips unanswered for twice deadlineGrace (set so, rather than
	// waited for): it opens.
	opens := l.Stats().BreakerOpens
	l.pending.Store(l.since() + 1 - 2*g)
	tctx, tcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer tcancel()
	// The caller is answered as gone (its deadline passed first); the
	// breaker still judges the round trip: a stall.
	if d, err := l.AllowN(tctx, "k", 1); d.Allowed || errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %+v, %v", d, err)
	}
	if st := l.Stats(); st.BreakerOpens != opens+1 || l.br.err() == nil {
		t.Fatalf("a stalled reply past the deadline did not open the breaker: %+v", st)
	}
}
