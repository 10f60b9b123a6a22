package engine_test

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// Ten waiters on a bucket of 1 at 20 per second book consecutive slots and
// are released 50 ms apart, one per slot, never before the rate allows: on
// a ManualClock the clock only moves when the test moves it, so each
// release is pinned to its step.
func TestTokenBucketWaitersReleasedAtTheRate(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 20, Window: time.Second, Burst: 1, Clock: clk, DisableEviction: true})
	var mu sync.Mutex
	var booked []time.Duration
	defer engine.SetWaitHook(func(_ engine.Decision, wait time.Duration) {
		mu.Lock()
		booked = append(booked, wait)
		mu.Unlock()
	})()
	released := make(chan time.Duration, 10)
	for range 10 {
		go func() {
			_, err := e.Wait(context.Background(), "k", 1)
			if err != nil {
				released <- -1
				return
			}
			released <- time.Duration(clk.UnixNano() - t0.UnixNano())
		}()
	}
	untilWaits(t, clk, 9) // one admitted at once, nine asleep
	var got []time.Duration
	// The one admitted at once may reach the hook after the others are
	// asleep: wait for all ten bookings.
	for deadline := time.Now().Add(10 * time.Second); len(got) < 10; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%d bookings seen, want 10", len(got))
		}
		mu.Lock()
		got = slices.Clone(booked)
		mu.Unlock()
	}
	slices.Sort(got)
	for k := range 10 {
		require.Equal(t, time.Duration(k)*50*time.Millisecond, got[k], "booking %d", k)
	}
	var at []time.Duration
	at = append(at, recvDur(t, released))
	for k := 1; k < 10; k++ {
		clk.Advance(50 * time.Millisecond)
		at = append(at, recvDur(t, released))
	}
	for k, d := range at {
		require.GreaterOrEqual(t, d, time.Duration(k)*50*time.Millisecond, "release %d came before its slot", k)
	}
	require.Equal(t, 0, clk.Waits())
}

func recvDur(t *testing.T, ch <-chan time.Duration) time.Duration {
	t.Helper()
	select {
	case d := <-ch:
		require.GreaterOrEqual(t, d, time.Duration(0), "Wait failed")
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter released")
	}
	return 0
}

// The same on the real clock: releases are never earlier than the rate
// allows (the k-th at least k·50 ms after the start). How late they are
// depends on the machine and is not judged.
func TestTokenBucketWaitersRealClock(t *testing.T) {
	e := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 20, Window: time.Second, Burst: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	var at []time.Duration
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Wait(ctx, "k", 1)
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				d = -1
			}
			at = append(at, d)
		}()
	}
	wg.Wait()
	slices.Sort(at)
	for k, d := range at {
		require.GreaterOrEqual(t, d, time.Duration(k)*50*time.Millisecond, "release %d", k)
	}
}

// A waiter whose ctx ends gives its booking back when it is the newest:
// the next request then books its slot. A booking with a later one behind
// it stays taken, and the later one keeps its slot.
func TestTokenBucketWaitCancelGivesBack(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 20, Window: time.Second, Burst: 1, Clock: clk, DisableEviction: true})
	require.True(t, e.AllowAt("k", 1, t0).Allowed) // the slot at t0 is taken
	ctxB, cancelB := context.WithCancel(context.Background())
	b := goWait(ctxB, e, "k", 1) // books +50 ms
	untilWaits(t, clk, 1)
	ctxC, cancelC := context.WithCancel(context.Background())
	c := goWait(ctxC, e, "k", 1) // books +100 ms
	untilWaits(t, clk, 2)
	require.Equal(t, 150*time.Millisecond, e.AllowAt("k", 1, t0).RetryAfter)

	cancelC() // the newest booking: given back
	require.ErrorIs(t, recv(t, c).err, context.Canceled)
	require.Equal(t, 100*time.Millisecond, e.AllowAt("k", 1, t0).RetryAfter)

	d := goWait(context.Background(), e, "k", 1) // books +100 ms, C's old slot
	untilWaits(t, clk, 2)
	cancelB() // not the newest: its slot stays taken, D keeps +100 ms
	require.ErrorIs(t, recv(t, b).err, context.Canceled)
	require.Equal(t, 150*time.Millisecond, e.AllowAt("k", 1, t0).RetryAfter)
	clk.Advance(100*time.Millisecond - 1)
	select {
	case <-d:
		t.Fatal("released 1 ns before its slot")
	default:
	}
	clk.Advance(1)
	require.NoError(t, recv(t, d).err)
}

// A wait past ctx's deadline books nothing and says so at once; n above
// Burst can never be admitted.
func TestTokenBucketWaitRefusals(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 20, Window: time.Second, Burst: 2, Clock: clk, DisableEviction: true})
	require.True(t, e.AllowAt("k", 2, t0).Allowed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	d, err := e.Wait(ctx, "k", 1)
	require.ErrorIs(t, err, engine.ErrWaitExceedsDeadline)
	require.Equal(t, 50*time.Millisecond, d.RetryAfter)
	require.Equal(t, 50*time.Millisecond, e.AllowAt("k", 1, t0).RetryAfter, "the refused wait booked nothing")
	_, err = e.Wait(context.Background(), "k", 3)
	require.ErrorIs(t, err, engine.ErrNeverAdmitted)
	d, err = e.Wait(context.Background(), "k", 0)
	require.NoError(t, err)
	require.True(t, d.Allowed)
}

// A Wait books no further ahead than the key's state reaches (2^61 units
// of 1/L' ns, docs/design.md §11): with L' = 2^40 − 1 and T = 2^59 units,
// two bookings fit past an empty bucket of 2, and a third is refused at
// once with ErrNeverAdmitted, booking nothing.
func TestTokenBucketWaitReach(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: engine.MaxLimit, Window: 1 << 59, Burst: 2, Clock: clk, DisableEviction: true})
	require.True(t, e.AllowAt("k", 2, t0).Allowed)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := goWait(ctx, e, "k", 1)
	untilWaits(t, clk, 1)
	b := goWait(ctx, e, "k", 1)
	untilWaits(t, clk, 2)
	before := e.AllowAt("k", 1, t0).RetryAfter
	_, err := e.Wait(ctx, "k", 1)
	require.ErrorIs(t, err, engine.ErrNeverAdmitted)
	require.Equal(t, before, e.AllowAt("k", 1, t0).RetryAfter, "the refused wait booked nothing")
	cancel()
	require.ErrorIs(t, recv(t, b).err, context.Canceled)
	require.ErrorIs(t, recv(t, a).err, context.Canceled)
}
