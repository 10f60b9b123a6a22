package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Contradicts, if it fails: Wait's TokenBucket doc ("concurrent waiters are
// released at the rate, in the order they booked") and the "10
// waiters on a bucket of 1 at 20 per second are released about 50 ms apart,
// never earlier than the rate allows".
func TestAdvTokenBucketWaitOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := engine.NewManualClock(t0)
	e := newAdv(t, advCfg{20, time.Second, 1}, clk)
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

// Contradicts, if it fails: design.md §11 "a Wait that would book past it
// records nothing and returns ErrNeverAdmitted" (reach 2^61/L' ns: 2 ms for
// MaxLimit per 2^59 ns), ErrWaitExceedsDeadline "records nothing", and
// ErrNeverAdmitted for n > Burst.
func TestAdvTokenBucketWaitRefusalsRecordNothing(t *testing.T) {
	t0 := time.Now()
	clk := engine.NewManualClock(t0)
	e := newAdv(t, advCfg{engine.MaxLimit, 1 << 59, 2}, clk) // T ≈ 0.524 ms
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
	e2 := newAdv(t, advCfg{1, time.Hour, 1}, clk)
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

// Contradicts, if it fails: Decision.RetryAfter doc "It counts from the
// request's own now, also when now was older than the key's newest time and
// the decision was made there", with design.md §11 "a t older than the
// ring's base is decided at the base".
func TestAdvTokenBucketOlderThanBaseRetryAfter(t *testing.T) {
	t1 := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	e := newAdv(t, advCfg{10, time.Second, 5}, engine.NewManualClock(t1))
	e.AllowAt("k", 5, t1)
	older := t1.Add(-500 * time.Millisecond)
	d := e.AllowAt("k", 1, older)
	if d.Allowed || d.RetryAfter != 600*time.Millisecond {
		t.Fatalf("older than base: %+v, want refused, RetryAfter 600ms", d)
	}
	if d := e.AllowAt("k", 1, older.Add(600*time.Millisecond-1)); d.Allowed {
		t.Fatal("admitted 1 ns before RetryAfter")
	}
	if d := e.AllowAt("k", 1, older.Add(600*time.Millisecond)); !d.Allowed {
		t.Fatalf("refused at RetryAfter: %+v", d)
	}
}
