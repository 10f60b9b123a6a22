package engine_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
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
