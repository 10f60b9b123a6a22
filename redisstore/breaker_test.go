package redisstore

import (
	"errors"
	"testing"
	"time"
)

var errDown = errors.New("down")

// A manual breaker, step by step: only a successful probe closes it, and
// not one that a trip overlapped.
func TestBreakerSteps(t *testing.T) {
	var result error
	var during func()
	b := newBreaker(func(<-chan struct{}) error {
		if during != nil {
			during()
		}
		return result
	}, time.Millisecond, time.Second, true)
	if b.err() != nil {
		t.Fatal("a new breaker is open")
	}
	if !b.trip(errDown) || b.trip(errDown) {
		t.Fatal("trip should report that the first call opened it, and only the first")
	}
	if err := b.err(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, errDown) {
		t.Fatalf("err() = %v, want it to wrap ErrUnavailable and the cause", err)
	}
	result = errDown
	if b.probeOnce() || b.err() == nil {
		t.Fatal("a failed probe closed the breaker")
	}
	result, during = nil, func() { b.trip(errDown) }
	if b.probeOnce() || b.err() == nil {
		t.Fatal("a probe that a trip overlapped closed the breaker")
	}
	during = nil
	if !b.probeOnce() || b.err() != nil {
		t.Fatal("a successful probe did not close the breaker")
	}
	b.stop()
}

// The prober goroutine probes at doubling intervals, closes the breaker on
// the first success and ends; stop ends one that is still probing.
func TestBreakerProber(t *testing.T) {
	calls := make(chan time.Time, 16)
	fail := make(chan bool, 16)
	b := newBreaker(func(<-chan struct{}) error {
		calls <- time.Now()
		if <-fail {
			return errDown
		}
		return nil
	}, 2*time.Millisecond, 8*time.Millisecond, false)
	start := time.Now()
	b.trip(errDown)
	var at []time.Duration
	for _, f := range []bool{true, true, true, true, false} {
		fail <- f
		at = append(at, (<-calls).Sub(start))
	}
	b.wg.Wait() // the prober ends after its success
	if b.err() != nil {
		t.Fatal("still open after a successful probe")
	}
	// Waits of 2, 4, 8 and 8 ms (capped): probes at ≥ 2, 6, 14, 22, 30 ms.
	for i, want := range []time.Duration{2, 6, 14, 22, 30} {
		if at[i] < want*time.Millisecond {
			t.Fatalf("probe %d at %v, before %v ms: %v", i, at[i], want, at)
		}
	}
	b.trip(errDown)
	fail <- true
	<-calls
	b.stop() // waits for the goroutine
	if b.err() == nil {
		t.Fatal("stop changed the state")
	}
	if b.trip(errDown) {
		t.Fatal("the breaker was open")
	}
	select {
	case <-calls:
		t.Fatal("a probe after stop")
	case <-time.After(20 * time.Millisecond): // longer than the first wait (2 ms)
	}
}
