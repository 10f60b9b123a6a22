package engine_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// waitResult is what a Wait in a goroutine returned.
type waitResult struct {
	d   engine.Decision
	err error
}

func goWait(ctx context.Context, e *engine.Engine, key string, n int64) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		d, err := e.Wait(ctx, key, n)
		ch <- waitResult{d, err}
	}()
	return ch
}

// untilWaits yields until clk has n pending waits: the waiters are asleep.
func untilWaits(t *testing.T, clk *engine.ManualClock, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Waits() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waits pending, want %d", clk.Waits(), n)
		}
		runtime.Gosched()
	}
}

func recv(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
	}
	return waitResult{}
}

// sleeps records every sleep Wait takes, and checks it against the rule:
// at least the denial's RetryAfter, at most RetryAfter/8 or 1 ms more.
type sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
	bad   []string
}

func recordSleeps(t *testing.T) *sleeps {
	s := &sleeps{}
	t.Cleanup(engine.SetWaitHook(func(d engine.Decision, wait time.Duration) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.waits = append(s.waits, wait)
		if d.Allowed || d.RetryAfter <= 0 || wait < d.RetryAfter || wait > d.RetryAfter+min(d.RetryAfter/8, time.Millisecond) {
			s.bad = append(s.bad, "sleep "+wait.String()+" for "+d.RetryAfter.String())
		}
	}))
	t.Cleanup(func() { require.Empty(t, s.bad) })
	return s
}

func (s *sleeps) get() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// With a ManualClock, Wait sleeps on the clock: it wakes exactly when the
// clock reaches the end of its sleep, never before, and is then admitted.
func TestWaitManualClock(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s := recordSleeps(t)
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 2, Algorithm: alg, Clock: clk, DisableEviction: true})
			require.True(t, e.AllowN("k", 2).Allowed)
			ra := e.AllowN("k", 1).RetryAfter
			ch := goWait(context.Background(), e, "k", 1)
			untilWaits(t, clk, 1)
			wait := s.get()[0]
			require.GreaterOrEqual(t, wait, ra)
			clk.Advance(wait - 1)
			select {
			case r := <-ch:
				t.Fatalf("Wait returned %+v before its sleep ended", r)
			default:
			}
			require.Equal(t, 1, clk.Waits(), "still asleep")
			clk.Advance(1)
			r := recv(t, ch)
			require.NoError(t, r.err)
			require.True(t, r.d.Allowed)
			require.Len(t, s.get(), 1, "one sleep, one retry")
			require.Equal(t, 0, clk.Waits())
			after := e.AllowN("k", 0)
			require.Equal(t, r.d.Remaining, after.Remaining, "the unit was recorded")
			require.Less(t, after.Remaining, int64(2))
		})
	}
}

// A wait of under 8 ns gets no jitter (an eighth of it is 0 ns): Wait
// sleeps exactly RetryAfter, on nanosecond sub-windows.
func TestWaitOfAFewNanosecondsSleepsExactly(t *testing.T) {
	s := recordSleeps(t)
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 1, Window: 6, SubWindows: 6, Clock: clk, DisableEviction: true})
	require.True(t, e.AllowN("k", 1).Allowed)
	ra := e.AllowN("k", 1).RetryAfter
	require.Less(t, ra, 8*time.Nanosecond)
	ch := goWait(context.Background(), e, "k", 1)
	untilWaits(t, clk, 1)
	require.Equal(t, []time.Duration{ra}, s.get())
	clk.Advance(ra)
	r := recv(t, ch)
	require.NoError(t, r.err)
	require.True(t, r.d.Allowed)
}

// Two waiters for the one unit a window frees: one is admitted, the other
// sleeps again, for its new RetryAfter; each retry follows a sleep.
func TestWaitContention(t *testing.T) {
	s := recordSleeps(t)
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: engine.SlidingWindowStrict, SubWindows: 2, Clock: clk, DisableEviction: true})
	require.True(t, e.AllowN("k", 1).Allowed)
	a, b := goWait(context.Background(), e, "k", 1), goWait(context.Background(), e, "k", 1)
	untilWaits(t, clk, 2)
	first := s.get()
	clk.Advance(max(first[0], first[1]))
	// One of them wins; the other was denied and sleeps again.
	var won waitResult
	var other <-chan waitResult
	select {
	case won = <-a:
		other = b
	case won = <-b:
		other = a
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter was admitted")
	}
	require.NoError(t, won.err)
	untilWaits(t, clk, 1)
	all := s.get()
	require.Len(t, all, 3, "the loser retried once and sleeps again")
	clk.Advance(all[2])
	r := recv(t, other)
	require.NoError(t, r.err)
	require.True(t, r.d.Allowed)
	require.Len(t, s.get(), 3)
}

func TestWaitReturnsAtOnce(t *testing.T) {
	recordSleeps(t)
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 2, Window: time.Second, Clock: clk, MaxKeys: 1, DisableEviction: true})
	require.True(t, e.AllowN("k", 2).Allowed)

	done, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := e.Wait(done, "k", 0)
	require.ErrorIs(t, err, context.Canceled, "a done ctx is checked first")
	require.False(t, d.Allowed)

	d, err = e.Wait(context.Background(), "k", 0)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	for _, n := range []int64{-1, 3} {
		d, err = e.Wait(context.Background(), "k", n)
		require.ErrorIs(t, err, engine.ErrNeverAdmitted)
		require.Contains(t, err.Error(), `Wait("k", `)
		require.Contains(t, err.Error(), "limit 2")
		require.Equal(t, engine.Never, d.RetryAfter)
	}
	d, err = e.Wait(context.Background(), "new", 1)
	require.ErrorIs(t, err, engine.ErrKeysFull)
	require.Equal(t, engine.ReasonKeysFull, d.Reason())

	// The room comes after the deadline: no sleep.
	ctx, cancel2 := context.WithTimeout(context.Background(), 500*ms)
	defer cancel2()
	d, err = e.Wait(ctx, "k", 1)
	require.ErrorIs(t, err, engine.ErrWaitExceedsDeadline)
	require.Equal(t, engine.ReasonLimited, d.Reason())
	require.Equal(t, 0, clk.Waits())
}

// A ManualClock that never moves: the waiter sleeps until ctx is cancelled,
// then returns ctx.Err() with its last denial and releases its wait.
func TestWaitCancelledWhileAsleep(t *testing.T) {
	recordSleeps(t)
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 1, Window: time.Second, Clock: clk, DisableEviction: true})
	require.True(t, e.AllowN("k", 1).Allowed)
	ctx, cancel := context.WithCancel(context.Background())
	ch := goWait(ctx, e, "k", 1)
	untilWaits(t, clk, 1)
	cancel()
	r := recv(t, ch)
	require.ErrorIs(t, r.err, context.Canceled)
	require.Equal(t, engine.ReasonLimited, r.d.Reason())
	require.Equal(t, 0, clk.Waits(), "the wait was released")
	require.False(t, e.AllowN("k", 1).Allowed, "nothing more was recorded")
}

// The real clock's path: a time.Timer, stopped on cancellation. It waits
// for real (a 20 ms window); nothing about its timing is asserted.
func TestWaitTimer(t *testing.T) {
	s := recordSleeps(t)
	e := newEngine(t, engine.Config{Limit: 1, Window: 20 * ms, SubWindows: 2})
	require.True(t, e.AllowN("k", 1).Allowed)
	d, err := e.Wait(context.Background(), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NotEmpty(t, s.get(), "it slept at least once")

	// Cancelled while asleep on the timer.
	ctx, cancel := context.WithCancel(context.Background())
	slept := make(chan struct{}, 16)
	t.Cleanup(engine.SetWaitHook(func(engine.Decision, time.Duration) { slept <- struct{}{} }))
	e2 := newEngine(t, engine.Config{Limit: 1, Window: time.Hour})
	require.True(t, e2.AllowN("k", 1).Allowed)
	ch := goWait(ctx, e2, "k", 1)
	<-slept
	cancel()
	r := recv(t, ch)
	require.True(t, errors.Is(r.err, context.Canceled), "%v", r.err)
}

// The sleep counts from the denial, on the engine's clock: a clock moved
// past the retry instant between the denial and the sleep (here, by the
// hook that runs in between) leaves nothing to sleep, and the waiter
// retries at once, once.
func TestWaitCountsFromTheDenial(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 1, Window: time.Second, Clock: clk, DisableEviction: true})
	require.True(t, e.AllowN("k", 1).Allowed)
	sleeps := 0
	t.Cleanup(engine.SetWaitHook(func(_ engine.Decision, wait time.Duration) {
		sleeps++
		clk.Advance(wait)
	}))
	d, err := e.Wait(context.Background(), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 1, sleeps)
	require.Equal(t, 0, clk.Waits(), "no wait was registered")
}

func TestWaitEdges(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 2, Clock: clk, MaxKeys: 2})
	ctx := context.Background()
	if _, err := e.Wait(ctx, "k", 3); !errors.Is(err, engine.ErrNeverAdmitted) {
		t.Fatalf("n>limit: %v", err)
	}
	if _, err := e.Wait(ctx, "k", -1); !errors.Is(err, engine.ErrNeverAdmitted) {
		t.Fatalf("n<0: %v", err)
	}
	if d, err := e.Wait(ctx, "k", 0); err != nil || !d.Allowed {
		t.Fatalf("n=0: %v", err)
	}
	if e.Len() != 0 {
		t.Fatalf("Wait that recorded nothing created a key")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Wait(done, "k", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("done ctx: %v", err)
	}
	if e.AllowAt("k", 0, t0).Remaining != 2 {
		t.Fatal("done ctx recorded")
	}
	e.Allow("a")
	e.Allow("b")
	if _, err := e.Wait(ctx, "c", 1); !errors.Is(err, engine.ErrKeysFull) {
		t.Fatalf("keys full: %v", err)
	}
	// deadline before the room
	e.AllowN("a", 1)
	dctx, c2 := context.WithTimeout(ctx, 10*time.Millisecond)
	defer c2()
	if _, err := e.Wait(dctx, "a", 1); !errors.Is(err, engine.ErrWaitExceedsDeadline) {
		t.Fatalf("deadline: %v", err)
	}
	if clk.Waits() != 0 {
		t.Fatal("waits left")
	}
}

func TestWaitCtxCancelWhileAsleep(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		clk := engine.NewManualClock(t0)
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: alg, Clock: clk, DisableEviction: true})
		e.Allow("k")
		ctx, cancel := context.WithCancel(context.Background())
		type out struct {
			d   engine.Decision
			err error
		}
		ch := make(chan out, 1)
		go func() {
			d, err := e.Wait(ctx, "k", 1)
			ch <- out{d, err}
		}()
		for clk.Waits() != 1 {
			time.Sleep(time.Millisecond)
		}
		cancel()
		select {
		case o := <-ch:
			if !errors.Is(o.err, context.Canceled) || o.d.Allowed || o.d.Reason() != engine.ReasonLimited {
				t.Errorf("%v: %+v %v", alg, o.d, o.err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%v: Wait did not return on cancel", alg)
		}
		if clk.Waits() != 0 {
			t.Errorf("%v: wait not released: %d", alg, clk.Waits())
		}
	}
}

// A key whose newest time is ahead of the engine's clock: the clamped
// denial's RetryAfter counts from the clock's now, so one advance of
// RetryAfter + 1ms must let the waiter in.
func TestWaitFutureKey(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		clk := engine.NewManualClock(t0)
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, DisableEviction: true})
		e.AllowAt("k", 2, t0.Add(10*time.Second+300*time.Millisecond))
		d0 := e.AllowN("k", 1)
		if d0.Allowed {
			t.Fatal("allowed")
		}
		ch := make(chan error, 1)
		go func() {
			_, err := e.Wait(context.Background(), "k", 1)
			ch <- err
		}()
		for clk.Waits() != 1 {
			time.Sleep(time.Millisecond)
		}
		clk.Advance(d0.RetryAfter + time.Millisecond)
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%v: %v", alg, err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("%v: still waiting after RetryAfter %v + 1ms (waits %d)", alg, d0.RetryAfter, clk.Waits())
			clk.Advance(time.Hour)
			<-ch
		}
	}
}

func TestWaitClockBefore1970(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(-100, 0))
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: time.Second, Clock: clk})
	if _, err := e.Wait(context.Background(), "k", 1); !errors.Is(err, engine.ErrNeverAdmitted) {
		t.Fatalf("%v", err)
	}
	r := e.Reserve("k", 1)
	if r.Decision().RetryAfter != engine.Never || r.Cancel() {
		t.Fatal("reserve before 1970")
	}
}

// Many waiters on one key with a ManualClock: count attempts. With limit L
// per window and K waiters, each advance of one window admits at most L
// and nobody spins.
func TestWaitManyWaiters(t *testing.T) {
	clk := engine.NewManualClock(t0)
	const L, K = 3, 12
	e := newEngineNoCloseCheck(t, engine.Config{Limit: L, Window: time.Second, Algorithm: engine.FixedWindow, Clock: clk, DisableEviction: true})
	for i := 0; i < L; i++ {
		e.Allow("k")
	}
	var admitted atomic.Int32
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < K; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Wait(ctx, "k", 1); err == nil {
				admitted.Add(1)
			} else {
				t.Error(err)
			}
		}()
	}
	waitFor := func(n int) {
		dl := time.Now().Add(5 * time.Second)
		for clk.Waits() != n {
			if time.Now().After(dl) {
				t.Fatalf("waits %d, want %d (admitted %d)", clk.Waits(), n, admitted.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(K)
	for round := 1; round <= K/L; round++ {
		clk.Advance(time.Second + time.Millisecond)
		waitFor(K - round*L)
		dl := time.Now().Add(2 * time.Second)
		for admitted.Load() < int32(round*L) && time.Now().Before(dl) {
			time.Sleep(time.Millisecond)
		}
		if got := admitted.Load(); got != int32(round*L) {
			t.Fatalf("round %d: admitted %d", round, got)
		}
	}
	wg.Wait()
}
