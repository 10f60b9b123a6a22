package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// stepClock is a WaitClock whose every reading advances it by step (as if
// other goroutines moved a ManualClock between the reads), and which
// records each After call.
type stepClock struct {
	now   atomic.Int64
	step  atomic.Int64
	mu    sync.Mutex
	calls []afterCall
}

type afterCall struct {
	at, d time.Duration
	ch    chan struct{}
	stops *atomic.Int32
}

func (c *stepClock) UnixNano() int64 { return c.now.Add(c.step.Load()) }

func (c *stepClock) After(d time.Duration) (<-chan struct{}, func()) {
	at := c.now.Load()
	ch := make(chan struct{})
	var stops atomic.Int32
	c.mu.Lock()
	c.calls = append(c.calls, afterCall{at: time.Duration(at), d: d, ch: ch, stops: &stops})
	c.mu.Unlock()
	return ch, func() { stops.Add(1) }
}

var _ engine.WaitClock = (*stepClock)(nil)

// Wait promises to sleep until the denial's RetryAfter plus a jitter of at
// most min(RetryAfter/8, 1ms) has passed since the denial, on the engine's
// clock. With a clock that moves between the denial and the sleep, the
// sleep must be shortened by what already passed.
func TestReview4WaitSleepsFromTheDenial(t *testing.T) {
	c := &stepClock{}
	base := t13.UnixNano()
	c.now.Store(base)
	e := new13(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: engine.FixedWindow, Clock: c, DisableEviction: true})
	if !e.AllowAt("k", 1, time.Unix(0, base)).Allowed {
		t.Fatal("first denied")
	}
	// From now on, each reading moves the clock 50 ms.
	c.step.Store(int64(50 * time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := e.Wait(context.Background(), "k", 1)
		done <- err
	}()
	var call afterCall
	for {
		c.mu.Lock()
		n := len(c.calls)
		if n > 0 {
			call = c.calls[0]
		}
		c.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	end := int64(call.at + call.d)
	room := base + int64(time.Second) // the key's window has room from here
	t.Logf("After called at +%v for %v: wake at room+%v", time.Duration(int64(call.at)-base), call.d, time.Duration(end-room))
	c.step.Store(0)
	c.now.Store(end)
	close(call.ch)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if end > room+int64(time.Millisecond) {
		t.Errorf("Wait wakes %v after the room came (the jitter is at most 1ms): it slept RetryAfter from the After call, not from the denial", time.Duration(end-room))
	}
	if n := call.stops.Load(); n < 1 {
		t.Errorf("stop not called after the channel closed (%d)", n)
	}
}

// Many waiters on one key with a ManualClock: count attempts. With limit L
// per window and K waiters, each advance of one window admits at most L
// and nobody spins.
func TestReview4WaitManyWaiters(t *testing.T) {
	clk := engine.NewManualClock(t13)
	const L, K = 3, 12
	e := new13(t, engine.Config{Limit: L, Window: time.Second, Algorithm: engine.FixedWindow, Clock: clk, DisableEviction: true})
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

// Lowering the key's limit below n while a Wait sleeps: the next attempt
// can never fit, so Wait must return ErrNeverAdmitted rather than sleep
// forever.
func TestReview4WaitLimitLoweredWhileWaiting(t *testing.T) {
	clk := engine.NewManualClock(t13)
	e := new13(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2, Clock: clk, PerKeyLimits: true, DisableEviction: true})
	e.AllowN("k", 4)
	done := make(chan error, 1)
	go func() {
		_, err := e.Wait(context.Background(), "k", 3)
		done <- err
	}()
	for clk.Waits() != 1 {
		time.Sleep(time.Millisecond)
	}
	if err := e.SetLimit("k", 2); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	select {
	case err := <-done:
		t.Logf("err: %v", err)
		if err == nil {
			t.Fatal("admitted 3 > limit 2")
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("Wait did not return after the limit went below n (waits %d)", clk.Waits())
	}
}
