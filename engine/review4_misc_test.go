package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func TestReview4WaitCtxCancelWhileAsleep(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		clk := engine.NewManualClock(t13)
		e := new13(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: alg, Clock: clk, DisableEviction: true})
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
func TestReview4WaitFutureKey(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		clk := engine.NewManualClock(t13)
		e := new13(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, DisableEviction: true})
		e.AllowAt("k", 2, t13.Add(10*time.Second+300*time.Millisecond))
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

func TestReview4WaitClockBefore1970(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(-100, 0))
	e := new13(t, engine.Config{Limit: 2, Window: time.Second, Clock: clk})
	if _, err := e.Wait(context.Background(), "k", 1); !errors.Is(err, engine.ErrNeverAdmitted) {
		t.Fatalf("%v", err)
	}
	r := e.Reserve("k", 1)
	if r.Decision().RetryAfter != engine.Never || r.Cancel() {
		t.Fatal("reserve before 1970")
	}
}

// UpdateLimits growing a SlidingLog key, then Cancel.
func TestReview4CancelAfterUpdateLimitsGrowth(t *testing.T) {
	e := new13(t, engine.Config{Limit: 2, Window: time.Second, Algorithm: engine.SlidingLog, PerKeyLimits: true, DisableEviction: true})
	r := e.ReserveAt("k", 2, t13)
	if err := e.UpdateLimits(func(string, int64) int64 { return 50 }); err != nil {
		t.Fatal(err)
	}
	r2 := e.ReserveAt("k", 40, t13)
	if err := e.UpdateLimits(func(string, int64) int64 { return 500 }); err != nil {
		t.Fatal(err)
	}
	if !r.Cancel() || !r2.Cancel() {
		t.Fatal("cancel after growth false")
	}
	if rem := e.AllowAt("k", 0, t13).Remaining; rem != 500 {
		t.Fatalf("remaining %d", rem)
	}
}

// A KeyLimit that panics on the second request of an AllowAll (the design
// considers KeyLimit panics): after recovering, were the first request's
// units returned? (Doubtful as a promise: the panic is the caller's.)
func TestReview4AllowAllKeyLimitPanic(t *testing.T) {
	e := new13(t, engine.Config{Limit: 3, Window: time.Second, DisableEviction: true})
	f := new13(t, engine.Config{Limit: 3, Window: time.Second, DisableEviction: true, KeyLimit: func(k string) int64 {
		if k == "boom" {
			panic("keylimit")
		}
		return 0
	}})
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		engine.AllowAll(t13, engine.Request{Engine: e, Key: "k", N: 3}, engine.Request{Engine: f, Key: "boom", N: 1})
	}()
	if recovered != "keylimit" {
		t.Fatalf("the KeyLimit's panic did not go on: %v", recovered)
	}
	if rem := e.AllowAt("k", 0, t13).Remaining; rem != 3 {
		t.Errorf("after a panic inside AllowAll, the earlier request's %d units stay consumed (all-or-nothing not kept)", 3-rem)
	}
}
