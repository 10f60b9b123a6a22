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
func TestWaitSleepsFromTheDenial(t *testing.T) {
	c := &stepClock{}
	base := t0.UnixNano()
	c.now.Store(base)
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: engine.FixedWindow, Clock: c, DisableEviction: true})
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

// Lowering the key's limit below n while a Wait sleeps: the next attempt
// can never fit, so Wait must return ErrNeverAdmitted rather than sleep
// forever.
func TestWaitLimitLoweredWhileWaiting(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2, Clock: clk, PerKeyLimits: true, DisableEviction: true})
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

// Many real-clock waiters on one key: every sleep is RetryAfter plus at
// most min(RetryAfter/8, 1ms), and RetryAfter > 0.
func TestWaitContentionSleeps(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: 4 * time.Millisecond, SubWindows: 4, Algorithm: alg})
		var bad atomic.Int64
		var sleeps atomic.Int64
		var mu sync.Mutex
		var first string
		undo := engine.SetWaitHook(func(d engine.Decision, wait time.Duration) {
			sleeps.Add(1)
			j := min(d.RetryAfter/8, time.Millisecond)
			if d.RetryAfter <= 0 || wait < d.RetryAfter || wait > d.RetryAfter+j {
				bad.Add(1)
				mu.Lock()
				if first == "" {
					first = d.RetryAfter.String() + " / " + wait.String()
				}
				mu.Unlock()
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		var wg sync.WaitGroup
		var admits atomic.Int64
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if _, err := e.Wait(ctx, "k", 1); err == nil {
						admits.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		cancel()
		undo()
		t.Logf("%v: admits %d sleeps %d", alg, admits.Load(), sleeps.Load())
		if bad.Load() > 0 {
			t.Errorf("%v: %d sleeps outside [RetryAfter, RetryAfter+jitter]; first %s", alg, bad.Load(), first)
		}
	}
}

func TestWaitRealClockNoLeak(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 1, Window: 300 * time.Millisecond, Algorithm: engine.FixedWindow})
	e.Allow("k")
	base := runtime.NumGoroutine()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Wait(ctx, "k", 1)
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	wg.Wait()
	time.Sleep(20 * time.Millisecond)
	if n := runtime.NumGoroutine(); n > base+2 {
		t.Errorf("goroutines %d, base %d", n, base)
	}
	// a real wait: wakes after the room, not long after
	e2 := newEngineNoCloseCheck(t, engine.Config{Limit: 1, Window: 100 * time.Millisecond, Algorithm: engine.FixedWindow})
	d0 := e2.AllowN("k", 1)
	_ = d0
	st := time.Now()
	d1 := e2.AllowN("k", 1)
	ctx2, c2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer c2()
	if _, err := e2.Wait(ctx2, "k", 1); err != nil {
		t.Fatal(err)
	}
	el := time.Since(st)
	if el < d1.RetryAfter || el > d1.RetryAfter+50*time.Millisecond {
		t.Errorf("woke after %v, RetryAfter %v", el, d1.RetryAfter)
	}
}
