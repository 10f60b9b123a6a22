package grpclimit

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fakeTimers is the Client's clock in tests: Now is the real time (call
// deadlines are real), and a wait moves the engine's ManualClock by its
// length and fires at once, recording it; with block set, a wait never
// fires and its start is signalled on started instead.
type fakeTimers struct {
	clk     *engine.ManualClock
	block   bool
	started chan time.Duration
	mu      sync.Mutex
	waits   []time.Duration
}

func (f *fakeTimers) Now() time.Time { return time.Now() }

func (f *fakeTimers) After(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	f.waits = append(f.waits, d)
	f.mu.Unlock()
	if f.block {
		f.started <- d
		return make(chan time.Time), func() bool { return true }
	}
	f.clk.Advance(d)
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch, func() bool { return false }
}

func (f *fakeTimers) recorded() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.waits...)
}

// clientTo returns a connection to a real loopback server through a Client
// over l, whose waits are faked by ft.
func clientTo(t *testing.T, l any, ft *fakeTimers, opts ...ClientOption) (*grpc.ClientConn, *Client, *echoServer) {
	t.Helper()
	c, err := NewClient(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if ft != nil {
		c.clk = ft
	}
	srvConn, es := serve(t)
	cc, err := grpc.NewClient(srvConn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(c.Unary()), grpc.WithStreamInterceptor(c.Stream()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc, c, es
}

// TestClientPaces: Limit 1 per 10 s (FixedWindow at an aligned instant).
// The first call goes at once; the second waits exactly the limiter's
// RetryAfter (10 s on the engine's clock; no real sleep) and is then sent;
// all calls on a connection share its target's key.
func TestClientPaces(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	ft := &fakeTimers{clk: clk}
	cc, c, es := clientTo(t, e, ft)
	for n := range 3 {
		if r := say(t, cc, nil, mSay); r.code != codes.OK {
			t.Fatalf("call %d: %v %s", n, r.code, r.msg)
		}
	}
	if w := ft.recorded(); len(w) != 2 || w[0] != 10*time.Second || w[1] != 10*time.Second {
		t.Errorf("waits %v, want [10s 10s]", w)
	}
	if es.count() != 3 {
		t.Errorf("the server saw %d calls", es.count())
	}
	if s := c.Stats(); s != (ClientStats{Admitted: 1, Delayed: 2, Waited: 20 * time.Second}) {
		t.Errorf("Stats %+v", s)
	}
	if d := e.AllowN(cc.Target(), 0); d.Remaining != 0 {
		t.Errorf("the calls were not charged to the target's key: %+v", d)
	}
}

// TestClientDeadlineShorterThanWait: a call whose deadline comes before
// the limiter would admit it fails at once, with RetryInfo, and is not
// sent; so does a wait past WithMaxWait.
func TestClientDeadlineShorterThanWait(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	ft := &fakeTimers{clk: clk}
	cc, c, es := clientTo(t, e, ft, WithMaxWait(5*time.Second))
	say(t, cc, nil, mSay)
	// A real 9 s deadline; the wait is 10 s. That the refusal does not
	// wait is checked by the timers, below (no wait started), not by the
	// time it took, which depends on the machine.
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
	defer cancel()
	r := say(t, cc, ctx, mSay)
	if r.code != codes.ResourceExhausted || r.retry != 10*time.Second || !strings.Contains(r.msg, "the call's deadline comes before the limiter would admit it") {
		t.Errorf("deadline before the wait ends: %v retry %v %q", r.code, r.retry, r.msg)
	}
	// No deadline, but WithMaxWait 5 s < 10 s.
	if r := say(t, cc, context.Background(), mSay); r.code != codes.ResourceExhausted || r.retry != 10*time.Second {
		t.Errorf("past WithMaxWait: %v retry %v", r.code, r.retry)
	}
	if len(ft.recorded()) != 0 || es.count() != 1 {
		t.Errorf("waits %v, server calls %d; want none, 1", ft.recorded(), es.count())
	}
	if s := c.Stats(); s != (ClientStats{Admitted: 1, Refused: 2}) {
		t.Errorf("Stats %+v", s)
	}
}

// TestClientCancelledWhileWaiting: cancelling the call's context during
// the wait ends it at once with Canceled; it is not sent.
func TestClientCancelledWhileWaiting(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	ft := &fakeTimers{clk: clk, block: true, started: make(chan time.Duration, 1)}
	cc, c, es := clientTo(t, e, ft)
	e.AllowN(cc.Target(), 1) // spent
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- say(t, cc, ctx, mSay) }()
	if d := adaptertest.Await(t, ft.started, "the call's wait"); d != 10*time.Second {
		t.Errorf("wait %v", d)
	}
	cancel()
	if r := adaptertest.Await(t, done, "the cancelled call's end"); r.code != codes.Canceled {
		t.Errorf("%v %q, want Canceled", r.code, r.msg)
	}
	if es.count() != 0 {
		t.Errorf("a cancelled call was sent")
	}
	if s := c.Stats(); s.Canceled != 1 || s.Admitted+s.Delayed+s.Refused+s.Errors != 0 {
		t.Errorf("Stats %+v", s)
	}
}

// TestClientNeverAndBackend: a cost that never fits fails at once; a
// failing ContextLimiter is followed (sent if Allowed, else Unavailable).
func TestClientNeverAndBackend(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Limit: 2})
	cc, c, _ := clientTo(t, e, &fakeTimers{clk: clk}, WithClientCost(mBig, 3), WithClientKey(func(_ context.Context, _ *grpc.ClientConn, m string) string { return "api" }))
	if r := say(t, cc, nil, mBig); r.code != codes.ResourceExhausted || r.retry != -1 {
		t.Errorf("cost 3 > limit 2: %v retry %v", r.code, r.retry)
	}
	if s := c.Stats(); s != (ClientStats{Refused: 1}) {
		t.Errorf("Stats %+v", s)
	}

	var d engine.Decision
	f := newRemote(func(string, int64) (engine.Decision, error) { return d, adaptertest.ErrBackend })
	cc, c, es := clientTo(t, f, nil)
	d = engine.Decision{Allowed: true, Limit: 5, Remaining: 5}
	if r := say(t, cc, nil, mSay); r.code != codes.OK {
		t.Errorf("fail-open: %v", r.code)
	}
	d = engine.Decision{Limit: 5, RetryAfter: time.Second}
	if r := say(t, cc, nil, mSay); r.code != codes.Unavailable || r.retry != time.Second {
		t.Errorf("fail-closed: %v retry %v", r.code, r.retry)
	}
	if s := c.Stats(); s != (ClientStats{Errors: 2}) || es.count() != 1 {
		t.Errorf("Stats %+v, server calls %d", s, es.count())
	}
}

// TestClientRealTimer: with the real clock and a 200 ms window, the
// second call really waits (about one window) and is then sent; the
// engine and the timer agree.
func TestClientRealTimer(t *testing.T) {
	e, err := engine.New(engine.Config{Limit: 1, Window: 200 * time.Millisecond, Algorithm: engine.SlidingLog})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cc, c, es := clientTo(t, e, nil)
	start := time.Now()
	for range 2 {
		if r := say(t, cc, nil, mSay); r.code != codes.OK {
			t.Fatalf("%v %s", r.code, r.msg)
		}
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Errorf("two calls at 1 per 200 ms took %v", el)
	}
	if s := c.Stats(); s.Admitted != 1 || s.Delayed != 1 || es.count() != 2 {
		t.Errorf("Stats %+v", s)
	}
}

// TestClientStream: a stream waits before it opens, and is charged once.
func TestClientStream(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	ft := &fakeTimers{clk: clk}
	cc, c, _ := clientTo(t, e, ft)
	for range 2 {
		st, err := cc.NewStream(context.Background(), chatDesc, mChat)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := st.SendMsg(wrapperspb.String("m")); err != nil {
				t.Fatal(err)
			}
			if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				t.Fatal(err)
			}
		}
		_ = st.CloseSend()
	}
	if s := c.Stats(); s.Admitted != 1 || s.Delayed != 1 || len(ft.recorded()) != 1 {
		t.Errorf("Stats %+v, waits %v", s, ft.recorded())
	}
}

// TestClientZeroRetryAfterDoesNotSpin: a limiter that answers "limited"
// with RetryAfter 0 makes the call wait 1 ms per answer, not spin.
func TestClientZeroRetryAfterDoesNotSpin(t *testing.T) {
	var mu sync.Mutex
	asks := 0
	f := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		mu.Lock()
		defer mu.Unlock()
		asks++
		if asks < 4 {
			return engine.Decision{Limit: 5, Remaining: 0}, nil // limited, no wait
		}
		return engine.Decision{Allowed: true, Limit: 5, Remaining: 4}, nil
	})
	clk := engine.NewManualClock(t0)
	ft := &fakeTimers{clk: clk}
	cc, c, _ := clientTo(t, f, ft)
	if r := say(t, cc, nil, mSay); r.code != codes.OK {
		t.Fatalf("%v %s", r.code, r.msg)
	}
	if w := ft.recorded(); len(w) != 3 || w[0] != time.Millisecond || w[2] != time.Millisecond {
		t.Errorf("waits %v, want three of 1ms", w)
	}
	if s := c.Stats(); s.Delayed != 1 {
		t.Errorf("Stats %+v", s)
	}
}

// TestClientMaxWaitHoldsForHugeRetryAfter: WithMaxWait bounds the total
// wait whatever RetryAfter a remote limiter answers. Before, the total was
// waited + wait, which wrapped for a RetryAfter near math.MaxInt64 after a
// first wait, and the call slept for it.
func TestClientMaxWaitHoldsForHugeRetryAfter(t *testing.T) {
	var mu sync.Mutex
	asks := 0
	f := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		mu.Lock()
		defer mu.Unlock()
		asks++
		switch asks {
		case 1:
			return engine.Decision{Limit: 5, RetryAfter: time.Second}, nil
		case 2:
			return engine.Decision{Limit: 5, RetryAfter: engine.Never - 1}, nil // limited, not Never
		}
		return engine.Decision{Allowed: true, Limit: 5, Remaining: 4}, nil
	})
	ft := &fakeTimers{clk: engine.NewManualClock(t0)}
	_, c, _ := clientTo(t, f, ft, WithMaxWait(time.Minute))
	// No deadline: WithMaxWait alone bounds the wait.
	if err := c.Wait(context.Background(), "api", 1); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Wait = %v, want ResourceExhausted", err)
	}
	if w := ft.recorded(); len(w) != 1 || w[0] != time.Second {
		t.Errorf("waits %v, want one of 1s", w)
	}
	if s := c.Stats(); s.Refused != 1 {
		t.Errorf("Stats %+v", s)
	}
}

// TestClientCountersPadded pins the Client counters' layout: each on its own
// cache line, the last followed by a full line.
func TestClientCountersPadded(t *testing.T) {
	// The Interceptor's counters are internal/adapter's Counters, pinned
	// by that package's TestCountersPadded.
	const cacheLine = adapter.CacheLine
	var c Client
	coffs := []uintptr{unsafe.Offsetof(c.admitted), unsafe.Offsetof(c.delayed), unsafe.Offsetof(c.refused), unsafe.Offsetof(c.canceled), unsafe.Offsetof(c.errs), unsafe.Offsetof(c.waited)}
	for n := 1; n < len(coffs); n++ {
		if coffs[n]-coffs[n-1] != cacheLine {
			t.Errorf("Client counters %d and %d are %d bytes apart", n-1, n, coffs[n]-coffs[n-1])
		}
	}
	if tail := unsafe.Sizeof(c) - coffs[len(coffs)-1]; tail != cacheLine {
		t.Errorf("Client's last counter has %d bytes to the end, want %d", tail, cacheLine)
	}
}
