package engine_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func TestReview4WaitRealClockNoLeak(t *testing.T) {
	e := new13(t, engine.Config{Limit: 1, Window: 300 * time.Millisecond, Algorithm: engine.FixedWindow})
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
	e2 := new13(t, engine.Config{Limit: 1, Window: 100 * time.Millisecond, Algorithm: engine.FixedWindow})
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
