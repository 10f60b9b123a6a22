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

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// hookCounter is an OnError hook that counts its calls.
type hookCounter struct{ n atomic.Int64 }

func (h *hookCounter) opt() Option { return WithOnError(func(error) { h.n.Add(1) }) }

// The plain breaker, step by step with the prober driven by the test: the
// first failure opens it; later decisions are the policy's with no round
// trip (no failure counted, no OnError call); a probe against the dead
// server fails, is counted and keeps it open; after the restart one probe
// closes it (through NOSCRIPT: the new server has no script) and decisions
// are Redis's again. The probe writes only its own key.
func TestBreakerSteps_Plain(t *testing.T) {
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

// The prober for real: kill under load, the breaker opens, decisions are
// answered without round trips, restart, decisions return to Redis; the
// prober ends once the breaker closes. No timing is asserted (the outage
// command measures it).
func TestBreakerRecovers(t *testing.T) {
	s := redistest.Start(t)
	var hook hookCounter
	l := mustNew(t, client(t, s), engine.Config{Limit: 1_000_000, Window: time.Minute}, hook.opt(), WithPolicy(FailOpen))
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
		for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("timed out waiting for %s: %+v", what, l.Stats())
			}
		}
	}
	waitFor("decisions", func() bool { return ok.Load() > 100 })
	s.Kill()
	waitFor("the breaker to open", func() bool { return l.br.err() != nil })
	waitFor("policy answers", func() bool { return unavailable.Load() > 1000 })
	st := l.Stats()
	// Each failure is one round trip: a decision's that met the kill, or
	// a probe's. Far fewer than the decisions answered.
	if st.Failures > 50 || st.FallbackDecisions < 1000 || st.Failures != uint64(hook.n.Load()) {
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
	for start := time.Now(); l.Stats().Failures < 3; time.Sleep(time.Millisecond) { // probes failing
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no probes: %+v", l.Stats())
		}
	}
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
	l := mustNew(t, client(t, s), engine.Config{Limit: 10, Window: time.Minute}, withManual())
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
// decision is Redis's or the policy's (with ErrUnavailable), each counted
// once; in the end decisions return to Redis, and Close leaves no
// goroutine.
func TestBreakerFlapping(t *testing.T) {
	s := redistest.Start(t)
	l, err := New(client(t, s), engine.Config{Limit: 1_000_000, Window: time.Minute}, WithBreaker(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
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
				if err != nil && (!errors.Is(err, ErrUnavailable) || d.Allowed) {
					errc <- fmt.Errorf("%+v %v", d, err)
					return
				}
			}
		})
	}
	for range 8 {
		time.Sleep(30 * time.Millisecond)
		s.Kill()
		time.Sleep(30 * time.Millisecond)
		s.Start()
	}
	before := l.Stats().RedisDecisions
	for start := time.Now(); l.Stats().RedisDecisions < before+50; time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no recovery after the flapping: %+v %v\n%s", l.Stats(), l.br.err(), stacks())
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.RedisDecisions+st.FallbackDecisions != uint64(calls.Load()) || st.BreakerOpens == 0 {
		t.Fatalf("%+v, calls %d", st, calls.Load())
	}
	t.Logf("%+v", st)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	noneLeft(t)
}

func TestWithBreakerErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	cfg := engine.Config{Limit: 1, Window: time.Second}
	for _, tc := range []struct{ min, max time.Duration }{
		{0, time.Second}, {time.Microsecond, time.Second}, {time.Second, time.Millisecond}, {time.Second, 2 * time.Minute}, {-1, -1},
	} {
		if _, err := New(c, cfg, WithBreaker(tc.min, tc.max)); err == nil || !strings.Contains(err.Error(), "WithBreaker") {
			t.Errorf("WithBreaker(%v, %v): %v", tc.min, tc.max, err)
		}
	}
	if _, err := New(c, cfg, WithBreaker(time.Millisecond, time.Second), WithHybrid(time.Millisecond, 1)); !errors.Is(err, errBreakerHybrid) {
		t.Errorf("WithBreaker with WithHybrid: %v", err)
	}
	for _, o := range []Option{WithBreaker(0, 0), WithBreaker(time.Millisecond, time.Millisecond)} {
		l, err := New(c, cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
	}
}

// Close while a probe waits for a stalled server: Close cancels it and
// returns once go-redis gives the probe up (here the client's 300 ms
// ReadTimeout), and no goroutine is left.
func TestBreakerCloseDuringStalledProbe(t *testing.T) {
	s := redistest.Start(t)
	l, err := New(client(t, s), engine.Config{Limit: 10, Window: time.Minute}, WithBreaker(time.Millisecond, time.Millisecond))
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
	for start := time.Now(); !strings.Contains(stacks(), "(*Limiter).probeCall"); time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("no probe in flight")
		}
	}
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

// With a ClusterClient the breakers are per master node: one node killed
// opens its own breaker, and keys on the other nodes keep being decided
// by Redis. After the node's restart (same port and cluster config, no
// data), one probe closes its breaker.
func TestBreakerClusterNode(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	defer cc.Close()
	var hook hookCounter
	l := mustNew(t, cc, engine.Config{Limit: 10, Window: time.Minute}, withManual(), hook.opt())
	owner := func(key string) string {
		c, err := cc.MasterForKey(ctx, l.Key(key))
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	// Two keys on different nodes; kill the first one's node.
	down, up := "a", ""
	for i := range 100 {
		if k := fmt.Sprint("b", i); owner(k) != owner(down) {
			up = k
			break
		}
	}
	if up == "" {
		t.Fatal("no key on another node")
	}
	for _, k := range []string{down, up} {
		if _, err := l.AllowN(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	var dead *redistest.Server
	for _, s := range nodes {
		if s.Addr() == owner(down) {
			dead = s
		}
	}
	dead.Kill()
	if _, err := l.AllowN(ctx, down, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the dead node's key: %v", err)
	}
	for i := range 20 {
		if _, err := l.AllowN(ctx, down, 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "breaker is open") {
			t.Fatalf("the dead node's key, decision %d: %v", i, err)
		}
		if d, err := l.AllowN(ctx, up, 0); err != nil || !d.Allowed {
			t.Fatalf("a live node's key while another node is down: %+v %v", d, err)
		}
	}
	if st := l.Stats(); st.Failures != 1 || st.BreakerOpens != 1 || st.RedisDecisions != 22 || hook.n.Load() != 1 {
		t.Fatalf("%+v", st)
	}
	pb := l.breakerFor(ctx, down, false)
	if pb == nil || l.breakerFor(ctx, up, false) != nil {
		t.Fatal("the breakers are not per node")
	}
	if pb.probeOnce() {
		t.Fatal("a probe closed the dead node's breaker")
	}
	// The restarted node answers PING at once but CLUSTERDOWN to scripts
	// until it has rejoined: the probes fail until then.
	dead.Start()
	for start := time.Now(); !pb.probeOnce(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("no recovery after the node's restart: %v", pb.err())
		}
	}
	t.Logf("probes that failed after the restart: %d", l.Stats().Failures-2)
	if d, err := l.AllowN(ctx, down, 1); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}

	// Close with a node's prober running: it ends, nothing is left.
	l2, err := New(cc, engine.Config{Limit: 10, Window: time.Minute}, WithBreaker(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	dead.Kill()
	if _, err := l2.AllowN(ctx, down, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	for start := time.Now(); l2.Stats().Failures < 3; time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no probes: %+v", l2.Stats())
		}
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	noneLeft(t)
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
