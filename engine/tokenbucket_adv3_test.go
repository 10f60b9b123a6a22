package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Contradicts, if it fails: Config.SweepInterval doc ("A TokenBucket key is
// kept until its bucket is full again") and design.md §11 "Eviction: a ring
// is reclaimable iff its bucket is full at the sweeper's now".
func TestAdvTokenBucketReclaimOnlyWhenFull(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := engine.NewManualClock(t0)
	e, err := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Millisecond, Burst: 3, Clock: clk, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.AllowAt("k", 3, t0)
	full := t0.Add(time.Duration(advCeil(bigRat(3_000_000, 7)))) // ⌈3·T⌉
	clk.Set(full.Add(-time.Nanosecond))
	e.Sweep()
	if e.Len() != 1 {
		t.Fatalf("a key that still owes units was reclaimed")
	}
	if d := e.AllowAt("k", 3, full.Add(-time.Nanosecond)); d.Allowed {
		t.Fatalf("3 fit 1 ns before the bucket is full: %+v", d)
	}
	clk.Set(full)
	e.Sweep()
	if d := e.AllowAt("k", 3, full); !d.Allowed {
		t.Fatalf("full bucket refused 3: %+v", d)
	}
	if d := e.AllowAt("k", 1, full); d.Allowed {
		t.Fatalf("Burst+1 after reclamation: %+v", d)
	}
	// MaxKeys: a new key while full is refused with ReasonKeysFull.
	e2, _ := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Millisecond, Burst: 3, Clock: clk, MaxKeys: 1, DisableEviction: true})
	defer e2.Close()
	e2.AllowAt("a", 1, full)
	if d := e2.AllowAt("b", 1, full); d.Allowed || d.Reason() != engine.ReasonKeysFull {
		t.Fatalf("MaxKeys: %+v %v", d, d.Reason())
	}
}

// Contradicts, if it fails: AllowAll doc ("admits every request or none") with
// TokenBucket engines: a refused AllowAll leaves the buckets as they were.
func TestAdvTokenBucketAllowAll(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newAdv(t, advCfg{7, time.Millisecond, 3}, engine.NewManualClock(t0))
	b := newAdv(t, advCfg{3, 10, 2}, engine.NewManualClock(t0))
	i, d := engine.AllowAll(t0, engine.Request{Engine: a, Key: "k", N: 2}, engine.Request{Engine: b, Key: "k", N: 2}, engine.Request{Engine: a, Key: "k", N: 2})
	if i != 2 || d.Allowed {
		t.Fatalf("AllowAll: %d %+v, want refused at 2", i, d)
	}
	if d := a.AllowAt("k", 3, t0); !d.Allowed {
		t.Fatalf("a refused AllowAll kept units on a: %+v", d)
	}
	if d := b.AllowAt("k", 2, t0); !d.Allowed {
		t.Fatalf("a refused AllowAll kept units on b: %+v", d)
	}
}

// Contradicts, if it fails: Engine.Wait doc with TokenBucket ("a waiter whose
// ctx ends gives its booking back if it is still the key's newest") and
// design.md §11 (a booking that is not the newest stays taken; waiters are
// released in booking order, never earlier than the rate allows).
func TestAdvTokenBucketWaitCancelNotNewest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := engine.NewManualClock(t0)
	e := newAdv(t, advCfg{20, time.Second, 1}, clk) // T = 50 ms
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
