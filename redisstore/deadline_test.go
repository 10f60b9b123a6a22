package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// "A decision returns by its caller's context deadline, plus scheduling
// delay, whatever the client's options": deadline callers (1–5 ms) mixed
// with no-deadline callers behind a slow link, then a stall, with the
// breaker on and off (off, every decision meets the slow round trips).
// The bound is a hang bound, far above scheduling delay on a loaded
// machine (92 ms measured beside two CPU hogs) and below what a caller
// that waited for Redis would show: every reply takes 2.5 s, and the stall
// lasts 1.2 s (ReadTimeout 5 s). The worst overrun is logged.
func TestDeadlineKeptBehindSlowLinkAndStall(t *testing.T) {
	const hang = 1500 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"breaker", nil}, {"nobreaker", []Option{WithBreaker(0, 0)}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.Start(t)
			p := startProxy(t, s.Addr())
			c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64, ReadTimeout: 5 * time.Second})
			defer c.Close()
			l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, tc.opts...)
			if _, err := l.AllowN(ctx, "k", 0); err != nil {
				t.Fatal(err)
			}
			p.delay.Store(int64(2500 * time.Millisecond))
			var worst, phase, deadlineCalls atomic.Int64
			var what atomic.Value
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i := range 12 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if i%3 == 0 {
							cx, cancel := context.WithCancel(context.Background())
							_, _ = l.AllowN(cx, "k", 1)
							cancel()
							time.Sleep(time.Millisecond)
							continue
						}
						dl := time.Duration(1+i%5) * time.Millisecond
						cx, cancel := context.WithTimeout(context.Background(), dl)
						t0 := time.Now()
						_, err := l.AllowN(cx, "k", 1)
						over := int64(time.Since(t0) - dl)
						cancel()
						deadlineCalls.Add(1)
						for {
							o := worst.Load()
							if over <= o || worst.CompareAndSwap(o, over) {
								if over > o {
									what.Store(fmt.Sprintf("phase %d: %v", phase.Load(), err))
								}
								break
							}
						}
						time.Sleep(time.Millisecond)
					}
				})
			}
			time.Sleep(time.Second)
			phase.Store(1)
			s.Signal(syscall.SIGSTOP)
			time.Sleep(1200 * time.Millisecond)
			s.Signal(syscall.SIGCONT)
			phase.Store(2)
			p.delay.Store(0)
			time.Sleep(300 * time.Millisecond)
			close(stop)
			wg.Wait()
			t.Logf("%d deadline calls; worst overrun past the deadline: %v (%v); %+v", deadlineCalls.Load(), time.Duration(worst.Load()), what.Load(), l.Stats())
			if time.Duration(worst.Load()) > hang {
				t.Errorf("a deadline caller returned %v after its deadline (%v)", time.Duration(worst.Load()), what.Load())
			}
		})
	}
}

// Issue 12: a decision returns by its caller's deadline whatever the
// client's options. With go-redis's defaults (ReadTimeout 5 s, no
// ContextTimeoutEnabled) and a stalled server (SIGSTOP), callers with a
// 20 ms deadline get nothing admitted, with an error wrapping
// context.DeadlineExceeded and not ErrUnavailable, within a few ms of it.
// The bound asserted (2 s) is a hang bound, below go-redis's ReadTimeout
// (the test is not a timing benchmark); the figures are logged.
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
	resume := stall(t, s)
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
	if worst > 2*time.Second { // a hang bound: below ReadTimeout (5 s), and no limit where there is none
		t.Fatalf("a caller took %v with a 20 ms deadline", worst)
	}
	if st := l.Stats(); st.CallerGone != callers || st.FallbackDecisions != 0 || st.Failures != 0 {
		t.Fatalf("stats %+v", st)
	}
	resume()
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

// A deadline that passes during the call: nothing is admitted, even under
// FailOpen (the caller left; the policy answers for Redis, not for it),
// and the error wraps the context's error, not ErrUnavailable. The proxy
// holds every reply for 300 ms; the client honours context deadlines.
func TestDeadlineDuringCall(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute}, WithFailurePolicy(FailOpen))
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(300 * time.Millisecond))
	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	d, err := l.AllowN(dctx, "k", 1)
	if d.Allowed || errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%+v %v", d, err)
	}
	if st := l.Stats(); st.CallerGone != 1 || st.Failures != 0 || st.FallbackDecisions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// README: a caller whose deadline passes gets the policy's answer; "if its
// call had not been sent yet, it is never sent ...; if it had, Redis may
// count it (the error says which)". Healthy server, short deadlines: every
// such error must say which.
func TestDeadlineErrorSaysWhetherCounted(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 64})
	defer c.Close()
	l, err := New(c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithBreaker(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var bad atomic.Int64
	var mu sync.Mutex
	var sample string
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 5))
			for range 200 {
				cx, cancel := context.WithTimeout(context.Background(), time.Duration(50+r.IntN(1000))*time.Microsecond)
				_, err := l.AllowN(cx, "c", 1)
				cancel()
				if err == nil || !errors.Is(err, ErrUnavailable) {
					continue
				}
				m := err.Error()
				if !strings.Contains(m, "Redis counted nothing") && !strings.Contains(m, "may have counted") {
					bad.Add(1)
					mu.Lock()
					sample = m
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Errorf("%d deadline errors do not say whether the call was sent, e.g. %q", bad.Load(), sample)
	}
}

type callOutcome int

const (
	outAdmitted callOutcome = iota + 1
	outDenied
	outNothing
	outMay
	outOther
	outBefore
)

// Every call on its own key: a "Redis counted nothing" error must leave its
// key empty; an admitted call leaves exactly its n; Stats must account for
// every decision exactly once; Failures == OnError calls.
func TestCountedNothingLeavesKeyEmpty(t *testing.T) {
	for _, breaker := range []bool{true, false} {
		t.Run(fmt.Sprint("breaker=", breaker), func(t *testing.T) {
			t.Parallel() // own server; the checks are counts, which no schedule changes
			s := redistest.Start(t)
			p := startProxy(t, s.Addr())
			c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64})
			defer c.Close()
			var hook hookCounter
			opts := []Option{hook.opt()}
			if !breaker {
				opts = append(opts, WithBreaker(0, 0))
			}
			l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
			if _, err := l.AllowN(ctx, "warm", 0); err != nil {
				t.Fatal(err)
			}
			p.delay.Store(int64(2 * time.Millisecond))
			const G, per = 24, 60
			out := make([][]callOutcome, G)
			ns := make([][]int64, G)
			var others atomic.Int64
			var sample atomic.Value
			var wg sync.WaitGroup
			for g := range G {
				out[g] = make([]callOutcome, per)
				ns[g] = make([]int64, per)
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 77))
					for j := range per {
						n := int64(1 + r.IntN(5))
						ns[g][j] = n
						cx, cancel := mixedContext(r, 4*time.Millisecond, 100*time.Microsecond, 5*time.Millisecond)
						d, err := l.AllowN(cx, fmt.Sprintf("k%d-%d", g, j), n)
						cancel()
						var o callOutcome
						switch {
						case err == nil && d.Allowed:
							o = outAdmitted
						case err == nil:
							o = outDenied
						case d.Allowed:
							o = outOther // only Redis's answer or the breaker's may admit
							others.Add(1)
							sample.Store(fmt.Sprintf("%+v %v", d, err))
						case strings.Contains(err.Error(), "counted nothing"):
							o = outNothing
						case strings.Contains(err.Error(), "may have counted"):
							o = outMay
						case errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "breaker is open"):
							o = outNothing // no round trip made
						case !errors.Is(err, ErrUnavailable) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
							o = outBefore
						default:
							o = outOther
							others.Add(1)
							sample.Store(fmt.Sprintf("%+v %v", d, err))
						}
						out[g][j] = o
					}
				})
			}
			wg.Wait()
			p.delay.Store(0)
			l.batch.wait()
			time.Sleep(50 * time.Millisecond)
			if others.Load() > 0 {
				t.Errorf("%d unclassified outcomes, e.g. %v", others.Load(), sample.Load())
			}
			cnt := map[callOutcome]int{}
			var bad []string
			for g := range G {
				for j := range per {
					o := out[g][j]
					cnt[o]++
					got := storedUnits(t, c, l, fmt.Sprintf("k%d-%d", g, j))
					switch o {
					case outAdmitted:
						if got != ns[g][j] {
							bad = append(bad, fmt.Sprintf("admitted k%d-%d n=%d stored %d", g, j, ns[g][j], got))
						}
					case outNothing, outBefore, outDenied:
						if got != 0 {
							bad = append(bad, fmt.Sprintf("outcome %d k%d-%d n=%d stored %d", o, g, j, ns[g][j], got))
						}
					case outMay:
						if got != 0 && got != ns[g][j] {
							bad = append(bad, fmt.Sprintf("may k%d-%d n=%d stored %d", g, j, ns[g][j], got))
						}
					}
				}
			}
			st := l.Stats()
			t.Logf("outcomes %v stats %+v hook %d", cnt, st, hook.n.Load())
			if len(bad) > 0 {
				t.Errorf("%d keys disagree, e.g. %v", len(bad), bad[:min(5, len(bad))])
			}
			if st.Failures != uint64(hook.n.Load()) {
				t.Errorf("Failures %d != OnError calls %d", st.Failures, hook.n.Load())
			}
			if st.RedisDecisions != uint64(cnt[outAdmitted]+cnt[outDenied]+1) {
				t.Errorf("RedisDecisions %d, want %d", st.RedisDecisions, cnt[outAdmitted]+cnt[outDenied]+1)
			}
			if st.FallbackDecisions+st.CallerGone != uint64(cnt[outNothing]+cnt[outMay]+cnt[outBefore]) {
				t.Errorf("FallbackDecisions %d + CallerGone %d, want %d", st.FallbackDecisions, st.CallerGone, cnt[outNothing]+cnt[outMay]+cnt[outBefore])
			}
		})
	}
}
