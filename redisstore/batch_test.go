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

// Issue 12: a decision returns by its caller's deadline whatever the
// client's options. With go-redis's defaults (ReadTimeout 5 s, no
// ContextTimeoutEnabled) and a stalled server (SIGSTOP), callers with a
// 20 ms deadline get the policy's answer, with an error wrapping
// ErrUnavailable and context.DeadlineExceeded, within a few ms of it. The
// bound asserted is generous (the test is not a timing benchmark); the
// figures are logged.
func TestDeadlineStalledServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  redis.Options
	}{
		{"defaults", redis.Options{}},
		{"ContextTimeoutEnabled", redis.Options{ContextTimeoutEnabled: true}}, // callers make their own round trips
		{"no ReadTimeout", redis.Options{ReadTimeout: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) { testDeadlineStalled(t, tc.opt) })
	}
}

func testDeadlineStalled(t *testing.T, opt redis.Options) {
	s := redistest.Start(t)
	opt.Addr = s.Addr()
	c := redis.NewClient(&opt)
	defer c.Close()
	var warned atomic.Bool
	l := mustNew(t, c, engine.Config{Limit: 100, Window: time.Minute}, WithOnError(func(err error) {
		if errors.Is(err, ErrUnboundedRoundTrip) {
			warned.Store(true)
		}
	}))
	if warned.Load() != (opt.ReadTimeout < 0) {
		t.Fatalf("ReadTimeout %v: warned %v", opt.ReadTimeout, warned.Load())
	}
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			s.Signal(syscall.SIGCONT)
		}
	}()
	const callers = 8
	var wg sync.WaitGroup
	took := make([]time.Duration, callers)
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			start := time.Now()
			d, err := l.AllowN(dctx, fmt.Sprint("k", i%3), 1)
			took[i] = time.Since(start)
			// The caller's deadline ended it: nothing admitted, whatever
			// the policy, and no ErrUnavailable (Redis did not fail it).
			if errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || d.Allowed || d.Limit != 100 {
				errs <- fmt.Errorf("caller %d: %+v %v", i, d, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var worst time.Duration
	for _, d := range took {
		worst = max(worst, d)
	}
	t.Logf("20 ms deadline, stalled server: %d callers returned in %v (the slowest)", callers, worst)
	if worst > 200*time.Millisecond {
		t.Fatalf("a caller took %v with a 20 ms deadline", worst)
	}
	if st := l.Stats(); st.CallerGone != callers || st.FallbackDecisions != 0 || st.Failures != 0 {
		t.Fatalf("stats %+v", st)
	}
	s.Signal(syscall.SIGCONT)
	resumed = true
	// The server answers again; the sender that was stuck in the client's
	// read comes back and the next decision is Redis's.
	var err error
	for range 50 {
		if _, err = l.AllowN(ctx, "k", 1); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Concurrent callers share round trips, and each gets its own key's answer:
// every caller has its own key and limit (KeyLimit), asks for varying n,
// and checks Limit and Remaining against its own exact count.
func TestBatchAttribution(t *testing.T) {
	s := redistest.Start(t)
	const callers = 48
	kl := func(k string) int64 {
		var i int64
		fmt.Sscanf(k, "c%d", &i)
		return 50 + i
	}
	l := mustNew(t, client(t, s), engine.Config{Limit: 1, Window: time.Minute, Algorithm: engine.SlidingWindowStrict, KeyLimit: kl})
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("c%d", i)
			limit := kl(key)
			used := int64(0)
			for j := range 40 {
				n := int64(1 + (i+j)%4)
				d, err := l.AllowN(ctx, key, n)
				if err != nil {
					errs <- err
					return
				}
				want := used+n <= limit
				if want {
					used += n
				}
				if d.Limit != limit || d.Allowed != want || d.Remaining != limit-used {
					errs <- fmt.Errorf("caller %d step %d n %d: %+v, want Allowed %v Limit %d Remaining %d", i, j, n, d, want, limit, limit-used)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, p := l.batch.rounds.Load(), l.batch.piped.Load()
	t.Logf("%d decisions in %d round trips, %d of them pipelines", callers*40, r, p)
	if p == 0 || r >= callers*40 {
		t.Fatalf("no batching: %d decisions in %d round trips, %d pipelines", callers*40, r, p)
	}
}

// Callers with mixed deadlines behind a slow network: those whose deadline
// passes get the policy's answer; a call whose caller gave up before it
// was sent is never sent, so Redis holds at most the units of the real
// admissions plus those of calls given up after they were sent.
func TestMixedDeadlines(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 1_000_000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.AllowN(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(15 * time.Millisecond))
	var real, abandonedSent, notSent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Go(func() {
			for j := range 6 {
				cctx, cancel := ctx, context.CancelFunc(func() {})
				if (i+j)%2 == 0 {
					cctx, cancel = context.WithTimeout(ctx, time.Duration(1+(i+j)%7)*time.Millisecond)
				}
				d, err := l.AllowN(cctx, "k", 1)
				cancel()
				switch {
				case err == nil && d.Allowed:
					real.Add(1)
				case errors.Is(err, errAbandoned):
					notSent.Add(1)
				case errors.Is(err, errNotAnswered):
					abandonedSent.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					// the deadline passed before the call: nothing asked
				default:
					errs <- fmt.Errorf("caller %d: %+v %v", i, d, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.delay.Store(0)
	l.batch.wait() // every round trip is back
	got := storedUnits(t, c, l, "k")
	t.Logf("admitted %d, given up before sending %d, after %d; Redis holds %d", real.Load(), notSent.Load(), abandonedSent.Load(), got)
	if got < real.Load() || got > real.Load()+abandonedSent.Load() {
		t.Fatalf("Redis holds %d units: want between %d (admitted) and %d (+ calls given up after they were sent)", got, real.Load(), real.Load()+abandonedSent.Load())
	}
	if notSent.Load() == 0 || real.Load() == 0 {
		t.Fatalf("the test did not exercise both: %d admitted, %d given up before sending", real.Load(), notSent.Load())
	}
}

// The connection cut while a batch is in flight (the server ran the
// calls, the client sees EOF): every caller of that batch gets the
// policy's answer with ErrUnavailable, none gets another caller's reply,
// and every later answer is its own key's exact count.
func TestCutDuringBatch(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	const callers = 32
	// No breaker: this test is about which caller a reply reaches, and
	// each failed call is followed at once by a peek that must reach Redis.
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithBreaker(0, 0))
	p.delay.Store(int64(time.Millisecond))
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	var failed atomic.Int64
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			key := fmt.Sprintf("c%d", i)
			used := int64(0)
			for j := range 30 {
				n := int64(1 + j%3)
				d, err := l.AllowN(ctx, key, n)
				if err != nil {
					if !errors.Is(err, ErrUnavailable) || d.Allowed {
						errs <- fmt.Errorf("caller %d: %+v %v", i, d, err)
						return
					}
					failed.Add(1)
					// It may have been counted: learn the count again
					// (the peek may meet a cut too).
					for range 10 {
						if d, err = l.AllowN(ctx, key, 0); err == nil {
							break
						}
					}
					if err != nil {
						errs <- err
						return
					}
					if got := 1000 - d.Remaining; got != used && got != used+n {
						errs <- fmt.Errorf("caller %d: %d units after a failed call of %d, had %d", i, got, n, used)
						return
					}
					used = 1000 - d.Remaining
					continue
				}
				used += n
				if !d.Allowed || d.Remaining != 1000-used {
					errs <- fmt.Errorf("caller %d step %d: %+v, want Remaining %d", i, j, d, 1000-used)
					return
				}
			}
		})
	}
	close(start)
	time.Sleep(20 * time.Millisecond)
	p.cut.Store(3)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d failed decisions, %d cuts, %d pipelines", failed.Load(), p.cuts.Load(), l.batch.piped.Load())
	if p.cuts.Load() == 0 || failed.Load() == 0 {
		t.Fatalf("no cut happened: %d cuts, %d failures", p.cuts.Load(), failed.Load())
	}
}

// SCRIPT FLUSH while concurrent callers' calls share pipelines: the calls
// that met NOSCRIPT did not run and are sent again, once; no other call is
// resent. Every caller's answers stay its own key's exact count, and Redis
// holds exactly the units admitted.
func TestScriptFlushDuringBatches(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const callers = 24
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	stop := make(chan struct{})
	flushes := 0
	var admitted atomic.Int64
	keys := make([]string, callers)
	for i := range callers {
		keys[i] = fmt.Sprintf("c%d", i)
		wg.Go(func() {
			used := int64(0)
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				n := int64(1 + j%2)
				d, err := l.AllowN(ctx, keys[i], n)
				if err != nil {
					errs <- err
					return
				}
				if used+n > 1000 {
					return
				}
				used += n
				admitted.Add(n)
				if !d.Allowed || d.Remaining != 1000-used {
					errs <- fmt.Errorf("caller %d step %d: %+v, want Remaining %d", i, j, d, 1000-used)
					return
				}
			}
		})
	}
	for range 10 {
		time.Sleep(5 * time.Millisecond)
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		flushes++
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := l.Stats()
	t.Logf("%d script flushes: %d NOSCRIPT reloads, %d pipelines, stats %+v", flushes, st.NoScript, l.batch.piped.Load(), st)
	if st.NoScript == 0 || st.Failures != 0 {
		t.Fatalf("stats %+v", st)
	}
	if got := storedUnits(t, c, l, keys...); got != admitted.Load() {
		t.Fatalf("Redis holds %d units, %d were admitted", got, admitted.Load())
	}
}

// Close waits for the round trips in flight, also those whose callers gave
// up at their deadlines, and no sender is left after it.
func TestCloseWaitsForSenders(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	l, err := New(c, engine.Config{Limit: 100, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	const delay = 150 * time.Millisecond
	p.delay.Store(int64(delay))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			defer cancel()
			if _, err := l.AllowN(dctx, "k", 1); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("want a deadline error, got %v", err)
			}
		})
	}
	wg.Wait() // every caller has returned; their round trips are still out
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < delay/2 {
		t.Fatalf("Close returned after %v, before the round trips in flight (%v) came back", took, delay)
	}
	for start := time.Now(); strings.Contains(stacks(), "redisstore.(*batcher)"); time.Sleep(time.Millisecond) {
		if time.Since(start) > time.Second {
			t.Fatalf("senders left after Close:\n%s", stacks())
		}
	}
	// Decisions still work after Close.
	p.delay.Store(0)
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
}
