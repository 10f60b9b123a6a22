package redisstore

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Issue 15, item 1: a cost above maxLocal is decided by Redis, so a hot key
// admits it while the window has room, and refuses it only for lack of
// room, with a RetryAfter that is not Never. The exact decision counts the
// units admitted here and not yet flushed.
func TestHybridCostAboveMaxLocal(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute}, WithHybrid(5*time.Millisecond, 5), withManual())
	if _, err := l.AllowN(ctx, "k", 1); err != nil { // the key's first decision: exact
		t.Fatal(err)
	}
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed { // local: the flush keeps the key (issue 32: one decided on only exactly is dropped)
		t.Fatal(d, err)
	}
	l.flushNow()
	admitted := int64(2)
	for i := range 50 {
		d, err := l.AllowN(ctx, "k", 1) // the traffic that keeps the key hot
		if err != nil || !d.Allowed {
			t.Fatalf("step %d, n=1: %+v %v", i, d, err)
		}
		d, err = l.AllowN(ctx, "k", 10)
		if err != nil || !d.Allowed {
			t.Fatalf("step %d, n=10: %+v %v", i, d, err)
		}
		admitted += 11
		l.flushNow()
	}
	if st := l.Stats(); st.RedisDecisions != 51 || st.LocalDecisions != 51 {
		t.Fatalf("stats %+v, want 51 exact decisions and 51 local ones", st)
	}

	// Near the limit: 4 local units pending, then a cost of 10 that only
	// 8 units of room could take, then one that fits exactly.
	fill := 1000 - admitted - 12
	if d, _, err := l.eval(ctx, "k", fill, 0); err != nil || !d.Allowed {
		t.Fatalf("filling: %+v %v", d, err)
	}
	l.flushNow()
	for range 4 {
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	d, err := l.AllowN(ctx, "k", 10)
	if err != nil || d.Allowed || d.Remaining != 8 || d.RetryAfter <= 0 || d.RetryAfter == engine.Never {
		t.Fatalf("a cost of 10 with 8 units of room: %+v %v", d, err)
	}
	if d, err := l.AllowN(ctx, "k", 8); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("a cost of 8 with 8 units of room: %+v %v", d, err)
	}
	l.flushNow()
	if got := storedUnits(t, c, l, "k"); got != 1000 {
		t.Fatalf("Redis holds %d units, want 1000", got)
	}
}

// Issue 15, item 4 and issue 7's flaky TestHybridFailure, made
// deterministic (no background flusher: the test runs every flush and
// probe). A failed flush puts the limiter in its failure state: every
// decision is the policy's, with ErrUnavailable, and costs no round trip
// and no OnError call; a flush finding nothing to send does not end it;
// only a probe that reaches Redis does, resending the unconfirmed batch.
func TestHybridFailure(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	var hook atomic.Int64
	l := mustNew(t, c, engine.Config{Limit: 50, Window: time.Minute}, WithHybrid(2*time.Millisecond, 10), WithOnError(func(error) { hook.Add(1) }), withManual())
	for i := range 2 {
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v %v", i, d, err)
		}
	}
	if st := l.Stats(); st.RedisDecisions != 1 || st.LocalDecisions != 1 {
		t.Fatalf("stats %+v", st)
	}
	s.Kill()
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("the local decision before the failed flush: %+v %v", d, err)
	}
	l.flushNow()
	if st := l.Stats(); st.Failures != 1 || hook.Load() != 1 {
		t.Fatalf("after the failed flush: stats %+v, hook %d", st, hook.Load())
	}
	for range 100 {
		d, err := l.AllowN(ctx, "k", 1)
		if d.Allowed || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("FailClosed in the failure state: %+v %v", d, err)
		}
		l.flushNow() // nothing to send, and no way out of the failure state
	}
	if st := l.Stats(); st.Failures != 1 || hook.Load() != 1 || st.FallbackDecisions != 100 {
		t.Fatalf("100 decisions in the failure state: stats %+v, hook %d", st, hook.Load())
	}
	if l.probeNow() {
		t.Fatal("a probe succeeded with the server down")
	}
	if st := l.Stats(); st.Failures != 2 || hook.Load() != 2 {
		t.Fatalf("a failed probe: stats %+v, hook %d", st, hook.Load())
	}
	s.Start()
	if !l.probeNow() {
		t.Fatalf("no recovery: %+v", l.Stats())
	}
	// The restarted server is empty (no persistence): the probe sent the
	// batch (2 units) again, and the first decision after it is local,
	// from the probe's observation.
	if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed || d.Remaining != 47 {
		t.Fatalf("after recovery: %+v %v", d, err)
	}
	l.flushNow()
	if got := storedUnits(t, c, l, "k"); got != 3 {
		t.Fatalf("Redis holds %d units, want 3", got)
	}
	if st := l.Stats(); st.LocalDecisions != 3 || st.LostUnits != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Issue 15, item 4, with the real prober: the failure state lasts while the
// server is down, whatever the traffic, and ends within about a second of
// its return (logged; the test waits up to hangBound).
func TestHybridProber(t *testing.T) {
	s := redistest.Start(t)
	var hook atomic.Int64
	l := mustNew(t, client(t, s), engine.Config{Limit: 1000, Window: time.Minute}, WithHybrid(2*time.Millisecond, 10), WithOnError(func(error) { hook.Add(1) }))
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	// The next exact decision fails and opens the failure state.
	if _, err := l.AllowN(ctx, "other", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	before := l.Stats()
	for range 1000 {
		if _, err := l.AllowN(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
	}
	st := l.Stats()
	if st.FallbackDecisions-before.FallbackDecisions != 1000 || st.Failures-before.Failures > 20 || uint64(hook.Load()) != st.Failures {
		t.Fatalf("1000 decisions in the failure state: %+v (before %+v), hook %d", st, before, hook.Load())
	}
	s.Start()
	start := time.Now()
	waitUntil(t, "recovery after the restart (by the prober, a background goroutine)", func() bool { return l.hyb.br.err() == nil }, func() any { return l.Stats() })
	t.Logf("recovered %v after the restart", time.Since(start).Round(time.Millisecond))
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
}

// Issue 15, item 5: a flush's deadline holds with go-redis's default
// timeouts (ReadTimeout 3 s). DEBUG SLEEP 1.5 stalls the server; the
// flush that meets it fails at its 500 ms deadline (a suspicion: the
// confirmation that follows may open the failure state), and the batch
// is counted once when a probe resends it (the server also ran the
// abandoned pipeline when it woke).
func TestHybridFlushDeadline(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr()}) // go-redis defaults
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 100_000, Window: time.Minute}, WithHybrid(5*time.Millisecond, 10), withManual())
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	admitted := int64(1)
	slept := make(chan error, 1)
	go func() {
		c2 := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 5 * time.Second})
		defer c2.Close()
		slept <- c2.Do(context.Background(), "DEBUG", "SLEEP", "1.5").Err()
	}()
	// Admit and flush until a flush meets the sleep: one that runs before
	// the sleep starts succeeds at once.
	var took time.Duration
	for l.Stats().Failures == 0 {
		if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		admitted++
		start := time.Now()
		l.flushNow()
		took = time.Since(start)
		if len(slept) > 0 {
			t.Fatal("the sleep ended and no flush failed")
		}
	}
	t.Logf("the stalled flush returned after %v (its deadline: 500 ms)", took)
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	if !l.probeNow() {
		t.Fatalf("no recovery: %+v", l.Stats())
	}
	if got := storedUnits(t, c, l, "k"); got != admitted {
		t.Fatalf("Redis holds %d units, want %d", got, admitted)
	}
}

// The same with SIGSTOP: a stopped server answers nothing; the flush fails
// at its deadline although go-redis would wait 2 s, and the confirmation
// that starts then finds the server silent and opens the failure state.
// After SIGCONT the server runs the abandoned pipeline, a probe resends
// the batch, and nothing is counted twice.
func TestHybridStalledServer(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 2 * time.Second, MaxRetries: -1})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 50, Window: time.Minute}, WithHybrid(5*time.Millisecond, 10), withManual())
	for range 4 {
		if _, err := l.AllowN(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	resume := stall(t, s)
	start := time.Now()
	l.flushNow()
	took := time.Since(start)
	if st := l.Stats(); st.Failures != 1 || st.BreakerOpens != 0 {
		t.Fatalf("the flush to a stopped server: a failure, and a suspicion only: %+v", st)
	}
	waitUntil(t, "the failure state, confirmed", func() bool { return l.hyb.br.err() != nil }, func() any { return l.Stats() })
	t.Logf("the flush gave up after %v; the failure state began %v after the stall", took, time.Since(start))
	if d, err := l.AllowN(ctx, "k", 1); d.Allowed || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("in the failure state: %+v %v", d, err)
	}
	resume()
	if !l.probeNow() {
		t.Fatalf("no recovery: %+v", l.Stats())
	}
	if got := storedUnits(t, c, l, "k"); got != 4 {
		t.Fatalf("Redis holds %d units, want 4", got)
	}
}

// Issue 15, item 6: go-redis (MaxRetries 3 by default) sends a pipeline
// again after a connection cut that came after Redis ran it. The batch's
// sequence number makes the second run add nothing.
func TestHybridRetryIsIdempotent(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr()}) // default MaxRetries
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 50, Window: time.Minute}, WithHybrid(5*time.Millisecond, 10), withManual())
	for range 6 {
		if _, err := l.AllowN(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	p.cut.Store(1)
	l.flushNow()
	if p.cuts.Load() != 1 {
		t.Fatal("the proxy cut nothing")
	}
	if got := storedUnits(t, client(t, s), l, "k"); got != 6 {
		t.Fatalf("Redis holds %d units, want 6", got)
	}
	if st := l.Stats(); st.Failures != 0 || st.Flushes != 1 {
		t.Fatalf("stats %+v", st)
	}
	// And a batch sent again on purpose: the same sequence number again.
	h := l.hyb
	h.mu.Lock()
	k := h.keys["k"]
	h.seq++
	seq := h.seq
	k.batch, k.batchSeq, k.batchAt = 2, seq, time.Now()
	h.mu.Unlock()
	l.flushNow()
	h.mu.Lock()
	k.batch, k.batchSeq, k.batchAt = 2, seq, time.Now()
	h.mu.Unlock()
	l.flushNow()
	if got := storedUnits(t, client(t, s), l, "k"); got != 8 {
		t.Fatalf("Redis holds %d units, want 8", got)
	}
}

// Issue 15, item 7: the counters say what answered each decision.
func TestStats(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	plain := mustNew(t, c, engine.Config{Limit: 50, Window: time.Minute})
	hyb := mustNew(t, c, engine.Config{Limit: 50, Window: time.Minute}, WithPrefix("h:"), WithHybrid(time.Second, 10), withManual())
	for range 5 {
		if _, err := plain.AllowN(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := hyb.AllowN(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	hyb.flushNow()
	if st := plain.Stats(); st != (Stats{RedisDecisions: 5, NoScript: 1}) {
		t.Fatalf("plain: %+v", st)
	}
	if st := hyb.Stats(); st != (Stats{RedisDecisions: 1, LocalDecisions: 4, Flushes: 1}) {
		t.Fatalf("hybrid: %+v", st)
	}
}

func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// noneLeft fails unless no goroutine of a limiter is left. A goroutine
// whose deferred WaitGroup.Done let Close return may still show for an
// instant while it exits, so the check looks again, for up to hangBound.
func noneLeft(t *testing.T) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		st := stacks()
		if !strings.Contains(st, "redisstore.(*hybrid)") && !strings.Contains(st, "redisstore.(*breaker)") {
			return
		}
		if time.Since(start) > hangBound {
			t.Fatalf("goroutines left after Close:\n%s", st)
		}
	}
}

// hybridLoad runs callers on replicas until stop is closed and returns the
// units admitted with a nil error. A decision that starts while down is set
// must be a policy answer.
func hybridLoad(t *testing.T, ls []*Limiter, keys []string, stop <-chan struct{}, down *atomic.Bool) *atomic.Int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i, l := range ls {
		for g := range 2 {
			wg.Go(func() {
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					n := int64(1 + (k+g)%3)
					if k%50 == 0 {
						n = 20 // above maxLocal: exact
					}
					wasDown := down.Load()
					d, err := l.AllowN(ctx, keys[(i+g+k)%len(keys)], n)
					if err == nil && d.Allowed {
						admitted.Add(n)
					}
					if wasDown && (err == nil || d.Allowed) {
						t.Errorf("a decision made in the failure state: %+v %v", d, err)
						return
					}
					if err != nil && !errors.Is(err, ErrUnavailable) {
						t.Error(err)
						return
					}
					if err != nil || !d.Allowed {
						time.Sleep(50 * time.Microsecond) // back off a little when refused
					}
				}
			})
		}
	}
	t.Cleanup(wg.Wait)
	return &admitted
}

// The server killed under load and started again: every answer while it is
// down is the policy's, with ErrUnavailable, and FailClosed admits nothing
// then; each replica recovers through its prober, every failure is
// reported once, and Close leaves nothing running.
func TestHybridKilledUnderLoad(t *testing.T) {
	s := redistest.Start(t)
	var hook atomic.Int64
	var ls []*Limiter
	for range 3 {
		ls = append(ls, mustNew(t, client(t, s), engine.Config{Limit: 100_000, Window: time.Minute}, WithHybrid(2*time.Millisecond, 10), WithOnError(func(error) { hook.Add(1) })))
	}
	keys := []string{"a", "b", "c"}
	stop := make(chan struct{})
	var down atomic.Bool
	admitted := hybridLoad(t, ls, keys, stop, &down)
	time.Sleep(50 * time.Millisecond) // load before the kill
	s.Kill()
	for _, l := range ls { // each replica notices (a flush or an exact decision fails)
		waitUntil(t, "failure state after the kill", func() bool { return l.hyb.br.err() != nil }, func() any { return l.Stats() })
	}
	down.Store(true)
	time.Sleep(50 * time.Millisecond) // load while down
	down.Store(false)                 // before the restart: no probe can succeed until then
	s.Start()
	for _, l := range ls {
		waitUntil(t, "recovery after the restart", func() bool { return l.hyb.br.err() == nil }, func() any { return l.Stats() })
	}
	time.Sleep(50 * time.Millisecond) // load after the recovery
	close(stop)
	var failures uint64
	for _, l := range ls {
		_ = l.Close() // the batches in flight at the kill may be unrecorded
		st := l.Stats()
		failures += st.Failures
		if st.FallbackDecisions == 0 || st.LocalDecisions == 0 {
			t.Fatalf("stats %+v", st)
		}
	}
	if uint64(hook.Load()) != failures {
		t.Fatalf("OnError called %d times for %d failures", hook.Load(), failures)
	}
	if got := storedUnits(t, client(t, s), ls[0], keys...); got > admitted.Load() {
		t.Fatalf("Redis holds %d units, more than the %d admitted since", got, admitted.Load())
	}
	noneLeft(t)
}

// A key that Redis cannot hold for us (another client wrote a string
// there: WRONGTYPE) fails alone: its units are given up and reported, the
// other keys are flushed, and the limiter stays out of its failure state.
func TestHybridWrongTypeKey(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	var hook atomic.Int64
	l := mustNew(t, c, engine.Config{Limit: 50, Window: time.Minute}, WithHybrid(5*time.Millisecond, 10), withManual(), WithOnError(func(error) { hook.Add(1) }))
	for _, k := range []string{"ok", "poison"} {
		for range 3 {
			if _, err := l.AllowN(ctx, k, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Set(ctx, l.Key("poison"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	l.flushNow()
	if err := l.hyb.br.err(); err != nil {
		t.Fatalf("one bad key put the limiter in its failure state: %v", err)
	}
	if st := l.Stats(); st.LostUnits != 2 || st.Failures != 1 || hook.Load() != 1 || st.Flushes != 1 {
		t.Fatalf("stats %+v, hook %d", st, hook.Load())
	}
	if got := storedUnits(t, c, l, "ok"); got != 3 {
		t.Fatalf("Redis holds %d units of the good key, want 3", got)
	}
	if d, err := l.AllowN(ctx, "ok", 1); err != nil || !d.Allowed {
		t.Fatalf("the good key after the flush: %+v %v", d, err)
	}
	if _, err := l.AllowN(ctx, "poison", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the bad key: %v", err)
	}
	if err := l.hyb.br.err(); err != nil {
		t.Fatalf("the bad key's exact decision put the limiter in its failure state: %v", err)
	}
}
