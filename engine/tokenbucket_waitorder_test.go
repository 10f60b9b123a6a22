package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// The token bucket's Wait: release order, refusals that record nothing,
// and a cancelled waiter whose booking is not the newest.

// Guards Wait's TokenBucket doc ("concurrent waiters are
// released at the rate, in the order they booked") and the "10
// waiters on a bucket of 1 at 20 per second are released about 50 ms apart,
// never earlier than the rate allows".
func TestTokenBucketWaitOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := engine.NewManualClock(t0)
	e := newRatBucket(t, ratCfg{20, time.Second, 1}, clk)
	e.AllowAt("k", 1, t0)
	const n = 10
	done := make(chan int, n)
	for i := 0; i < n; i++ {
		w := clk.Waits()
		go func(i int) {
			if _, err := e.Wait(context.Background(), "k", 1); err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			done <- i
		}(i)
		for clk.Waits() < w+1 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	for i := 0; i < n; i++ {
		slot := t0.Add(time.Duration(i+1) * 50 * time.Millisecond)
		clk.Set(slot.Add(-time.Nanosecond))
		select {
		case j := <-done:
			t.Fatalf("waiter %d released 1 ns before slot %d", j, i)
		case <-time.After(20 * time.Millisecond): // negative check
		}
		clk.Set(slot)
		if j := <-done; j != i {
			t.Fatalf("slot %d released waiter %d", i, j)
		}
	}
}

// Guards design.md §11 "a Wait that would book past it
// records nothing and returns ErrNeverAdmitted" (reach 2^61/L' ns: 2 ms for
// MaxLimit per 2^59 ns), ErrWaitExceedsDeadline "records nothing", and
// ErrNeverAdmitted for n > Burst.
func TestTokenBucketWaitRefusalsRecordNothing(t *testing.T) {
	t0 := time.Now()
	clk := engine.NewManualClock(t0)
	e := newRatBucket(t, ratCfg{engine.MaxLimit, 1 << 59, 2}, clk) // T ≈ 0.524 ms
	if _, err := e.Wait(context.Background(), "k", 3); !errors.Is(err, engine.ErrNeverAdmitted) {
		t.Fatalf("n > Burst: %v", err)
	}
	e.AllowAt("k", 2, t0)
	// Book waiters until the reach (≈2 ms of bookings) refuses one.
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 64)
	booked := 0
	var refusal error
	for i := 0; i < 64 && refusal == nil; i++ {
		w := clk.Waits()
		go func() { _, err := e.Wait(ctx, "k", 1); errs <- err }()
		for refusal == nil && clk.Waits() < w+1 {
			select {
			case err := <-errs:
				refusal = err
			default:
				time.Sleep(100 * time.Microsecond)
			}
		}
		if refusal == nil {
			booked++
		}
	}
	if !errors.Is(refusal, engine.ErrNeverAdmitted) {
		t.Fatalf("after %d bookings: %v, want ErrNeverAdmitted", booked, refusal)
	}
	if booked < 2 || booked > 8 {
		t.Fatalf("%d bookings within a reach of 2^61/L' ns ≈ 2.1 ms at T ≈ 0.52 ms", booked)
	}
	cancel()
	for i := 0; i < booked; i++ {
		<-errs
	}
	// ErrWaitExceedsDeadline records nothing.
	e2 := newRatBucket(t, ratCfg{1, time.Hour, 1}, clk)
	e2.AllowAt("k", 1, t0)
	dctx, dcancel := context.WithDeadline(context.Background(), t0.Add(time.Minute))
	defer dcancel()
	if _, err := e2.Wait(dctx, "k", 1); !errors.Is(err, engine.ErrWaitExceedsDeadline) {
		t.Fatalf("room after the deadline: %v", err)
	}
	if d := e2.AllowAt("k", 1, t0.Add(time.Hour)); !d.Allowed {
		t.Fatalf("a refused Wait recorded units: %+v", d)
	}
}

// Guards Engine.Wait doc with TokenBucket ("a waiter whose
// ctx ends gives its booking back if it is still the key's newest") and
// design.md §11 (a booking that is not the newest stays taken; waiters are
// released in booking order, never earlier than the rate allows).
func TestTokenBucketWaitCancelNotNewest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := engine.NewManualClock(t0)
	e := newRatBucket(t, ratCfg{20, time.Second, 1}, clk) // T = 50 ms
	if d := e.AllowAt("k", 1, t0); !d.Allowed {
		t.Fatal(d)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	doneA := make(chan error, 1)
	go func() { _, err := e.Wait(ctxA, "k", 1); doneA <- err }()
	for clk.Waits() < 1 {
		time.Sleep(time.Millisecond)
	}
	doneB := make(chan error, 1)
	go func() { _, err := e.Wait(context.Background(), "k", 1); doneB <- err }()
	for clk.Waits() < 2 {
		time.Sleep(time.Millisecond)
	}
	cancelA()
	if err := <-doneA; err == nil {
		t.Fatal("cancelled waiter admitted")
	}
	// A's booking (t0+50ms) is not the newest: it stays taken. A request at
	// t0+60ms must be refused, else B (at t0+100ms) and it would make 2 units
	// in 50 ms on a bucket of 1.
	if d := e.AllowAt("k", 1, t0.Add(60*time.Millisecond)); d.Allowed {
		t.Fatalf("non-newest cancelled booking given back: %+v", d)
	}
	clk.Set(t0.Add(100*time.Millisecond - time.Nanosecond))
	select {
	case err := <-doneB:
		t.Fatalf("B released before its slot: %v", err)
	case <-time.After(50 * time.Millisecond): // a negative check: can only miss, never fail falsely
	}
	clk.Set(t0.Add(100 * time.Millisecond))
	if err := <-doneB; err != nil {
		t.Fatalf("B: %v", err)
	}
	// Newest cancelled: given back.
	ctxC, cancelC := context.WithCancel(context.Background())
	doneC := make(chan error, 1)
	w := clk.Waits()
	go func() { _, err := e.Wait(ctxC, "k", 1); doneC <- err }()
	for clk.Waits() < w+1 {
		time.Sleep(time.Millisecond)
	}
	cancelC()
	if err := <-doneC; err == nil {
		t.Fatal("cancelled waiter C admitted")
	}
	if d := e.AllowAt("k", 1, t0.Add(150*time.Millisecond)); !d.Allowed {
		t.Fatalf("newest cancelled booking not given back: %+v", d)
	}
}
