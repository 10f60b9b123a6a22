package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// goneTally sorts the answers of callers whose contexts end early.
type goneTally struct {
	redisAdmits  atomic.Int64 // Allowed with a nil error: Redis admitted, and counted
	policyAdmits atomic.Int64 // Allowed with an error: the failure policy admitted
	bypass       atomic.Int64 // of them, answered for a caller whose context had ended
	bad          atomic.Int64 // an error wrapping both a context's error and ErrUnavailable that is not a breaker answer
	gone         atomic.Int64 // errors wrapping a context's error, nothing admitted
	first        atomic.Value // the first bypass's error, for the failure message
}

// breakerAnswer reports whether err is the breaker's (or the hybrid failure
// state's) answer: a policy answer for a backend found failing.
func breakerAnswer(err error) bool {
	var te *tripError
	return errors.As(err, &te) || strings.Contains(err.Error(), "breaker is open")
}

func (g *goneTally) add(d engine.Decision, err error, ended bool) {
	ctxErr := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	switch {
	case err == nil && d.Allowed:
		g.redisAdmits.Add(1)
	case err != nil && d.Allowed:
		g.policyAdmits.Add(1)
		if ended && !breakerAnswer(err) {
			g.bypass.Add(1)
			g.first.CompareAndSwap(nil, err.Error())
		}
	}
	if err != nil && ctxErr && !breakerAnswer(err) {
		g.gone.Add(1)
		if errors.Is(err, ErrUnavailable) {
			g.bad.Add(1)
			g.first.CompareAndSwap(nil, err.Error())
		}
	}
}

// hammerGone runs callers × calls decisions of one unit on key, each with
// a context that ends after 0–300 µs: a deadline for even callers, a
// cancellation (no deadline, as an HTTP request's) for odd ones.
func hammerGone(l *Limiter, key string, n int64, callers, calls int) *goneTally {
	g := &goneTally{}
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for j := range calls {
				after := time.Duration((i*131+j*37)%300) * time.Microsecond
				var cx context.Context
				var cancel context.CancelFunc
				if i%2 == 0 {
					cx, cancel = context.WithTimeout(context.Background(), after)
				} else {
					cx, cancel = context.WithCancel(context.Background())
					tm := time.AfterFunc(after, cancel)
					defer tm.Stop()
				}
				d, err := l.AllowN(cx, key, n)
				g.add(d, err, cx.Err() != nil)
				cancel()
			}
		})
	}
	wg.Wait()
	return g
}

// goneClient is a client whose own timeouts are far beyond the test: every
// failure seen is a caller's context ending, never the client's timeout.
func goneClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 64, ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A caller whose context ends before Redis answers is never admitted, under
// any policy: many callers with tiny deadlines and cancels on one key of
// limit 5. Before, FailOpen and FallbackLocal admitted every one of them
// that Redis had not answered in time (hundreds, uncounted): a client
// bought admissions with its own cancels.
func TestCallerGoneNeverAdmitted(t *testing.T) {
	s := redistest.Start(t)
	c := goneClient(t, s.Addr())
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"fail-open", []Option{WithFailurePolicy(FailOpen), WithBreaker(0, 0)}},
		{"fallback-local", []Option{WithFallbackLocal(1), WithBreaker(0, 0)}},
		{"fail-closed", []Option{WithBreaker(0, 0)}},
		{"fail-open-breaker", []Option{WithFailurePolicy(FailOpen)}},
		{"fail-open-hybrid", []Option{WithFailurePolicy(FailOpen), WithHybrid(time.Millisecond, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hook hookCounter
			const limit = 5
			l := mustNew(t, c, engine.Config{Limit: limit, Window: time.Hour, Algorithm: engine.SlidingWindowStrict}, append(tc.opts, hook.opt())...)
			key := "gone-" + tc.name
			n := int64(1)
			if l.hyb != nil {
				n = 2 // above maxLocal: every decision is exact, a script call
			}
			g := hammerGone(l, key, n, 32, 60)
			st := l.Stats()
			t.Logf("redis admits %d, policy admits %d (for ended callers %d), gone %d; stats %+v; OnError %d",
				g.redisAdmits.Load(), g.policyAdmits.Load(), g.bypass.Load(), g.gone.Load(), st, hook.n.Load())
			if b := g.bypass.Load(); b > 0 {
				t.Errorf("%d policy admissions for callers whose context had ended (a bypass of the limit), e.g. %v", b, g.first.Load())
			}
			if b := g.bad.Load(); b > 0 {
				t.Errorf("%d errors wrap both a context's error and ErrUnavailable, e.g. %v", b, g.first.Load())
			}
			if got := g.redisAdmits.Load() * n; got > limit {
				t.Errorf("Redis admitted %d units, limit %d", got, limit)
			}
			if st.BreakerOpens == 0 && g.policyAdmits.Load() > 0 {
				t.Errorf("%d policy admissions with the breaker never open and a healthy Redis", g.policyAdmits.Load())
			}
			if st.CallerGone == 0 || g.gone.Load() == 0 {
				t.Errorf("no call ended by its caller's context (CallerGone %d): the test did not test", st.CallerGone)
			}
		})
	}
}

// A caller's cancel is not a backend failure: on a healthy Redis, calls
// whose contexts end early count in CallerGone, never in Failures, and
// never reach the OnError hook. Before, each was a failure reported to
// OnError (thousands of false alerts from one client cancelling its own
// requests).
func TestCallerGoneIsNotAFailure(t *testing.T) {
	s := redistest.Start(t)
	c := goneClient(t, s.Addr())
	var errs []error
	var mu sync.Mutex
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute}, WithFailurePolicy(FailOpen), WithBreaker(0, 0),
		WithOnError(func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}))
	g := hammerGone(l, "k", 1, 16, 60)
	l.waitChecks()
	st := l.Stats()
	t.Logf("stats %+v, gone %d", st, g.gone.Load())
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 0 || st.Failures != 0 {
		t.Errorf("healthy Redis, callers cancelling: Failures %d, %d OnError calls, first %v", st.Failures, len(errs), errs[0])
	}
	if st.CallerGone != uint64(g.gone.Load()) || st.CallerGone == 0 {
		t.Errorf("Stats().CallerGone %d, but %d calls returned their context's error", st.CallerGone, g.gone.Load())
	}
	if sum := st.RedisDecisions + st.FallbackDecisions + st.CallerGone; sum != 16*60 {
		t.Errorf("RedisDecisions + FallbackDecisions + CallerGone = %d, want every call (%d) in exactly one", sum, 16*60)
	}
}

// A call whose context is done before it is made asks nothing and counts
// in CallerGone; a live caller on a dead server still gets the policy's
// answer with ErrUnavailable (the backend failed, the caller is there).
func TestCallerGoneAndBackendFailureApart(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	var hook hookCounter
	l := mustNew(t, c, engine.Config{Limit: 5, Window: time.Minute}, WithFailurePolicy(FailOpen), WithBreaker(0, 0), hook.opt())
	cx, cancel := context.WithCancel(ctx)
	cancel()
	d, err := l.AllowN(cx, "k", 1)
	if d.Allowed || !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancelled before the call: %+v, %v", d, err)
	}
	s.Kill()
	d, err = l.AllowN(ctx, "k", 1)
	if !d.Allowed || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("live caller, dead server, FailOpen: %+v, %v", d, err)
	}
	// Dead server and a caller whose deadline passes: a refused connection
	// shows Redis failing, so it is reported; the caller still gets nothing.
	cx, cancel = context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-cx.Done()
	d, err = l.AllowN(cx, "k", 1)
	if d.Allowed || errors.Is(err, ErrUnavailable) {
		t.Fatalf("deadline passed: %+v, %v", d, err)
	}
	if st := l.Stats(); st.CallerGone != 2 || st.FallbackDecisions != 1 || st.Failures != 1 || hook.n.Load() != 1 {
		t.Fatalf("stats %+v, OnError %d", st, hook.n.Load())
	}
}

// A round trip that failed once its caller's deadline had passed, its
// timer not yet fired, is marked as one Redis may have counted
// (errNotAnswered), as one whose context had ended is: ctxDone's
// judgement, not ctx.Err() alone. A live caller's failure is its own.
func TestMayHaveCountedJudgesAPassedDeadline(t *testing.T) {
	cut := errors.New("read tcp: i/o timeout")
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"live caller", ctx, cut, false},
		{"deadline passed, timer not fired", staleDeadline{ctx}, cut, true},
	} {
		got := mayHaveCounted(c.ctx, c.err)
		if errors.Is(got, errNotAnswered) != c.want || !errors.Is(got, c.err) {
			t.Errorf("%s: %v; want errNotAnswered %v, wrapping %v", c.name, got, c.want, c.err)
		}
	}
}

// A policy answer wraps ErrUnavailable and the backend's cause, never a
// context's error: code that tests errors.Is(err, context.DeadlineExceeded)
// before ErrUnavailable would take it for its own deadline. A path whose
// dials time out (a dialer that never connects: go-redis's dial timeout
// error matches context.DeadlineExceeded, as net's does) under FailOpen,
// with the breaker on and off: every answer wrapping ErrUnavailable,
// the first decision's, the open breaker's and a probe's, must match no
// context error. Before, the breaker kept its trip cause, and 80,018
// admitted FailOpen answers of one run matched context.DeadlineExceeded.
func TestFailurePolicyAnswerWrapsNoContextError(t *testing.T) {
	for _, tc := range []struct {
		br    Option
		calls int // without the breaker each waits for a confirmation
	}{{WithBreaker(time.Millisecond, 5*time.Millisecond), 40}, {WithBreaker(0, 0), 5}} {
		c := redis.NewClient(&redis.Options{
			Addr: "blackhole.invalid:6379", MaxRetries: -1, DialerRetries: 1, DialTimeout: 20 * time.Millisecond,
			Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
				<-ctx.Done() // a path that drops every SYN
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
			},
		})
		l := mustNew(t, c, engine.Config{Limit: 5, Window: time.Minute}, WithFailurePolicy(FailOpen), tc.br)
		var answers int
		for i := 0; i < tc.calls; i++ {
			d, err := l.AllowN(ctx, "k", 1)
			if !errors.Is(err, ErrUnavailable) || !d.Allowed {
				t.Fatalf("call %d: want FailOpen's answer: %+v %v", i, d, err)
			}
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				t.Fatalf("call %d: a policy answer matches a context's error: %v", i, err)
			}
			answers++
			time.Sleep(time.Millisecond) // let the prober try
		}
		st := l.Stats()
		t.Logf("%d answers; %+v", answers, st)
		_ = l.Close()
		_ = c.Close()
	}
}
