package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Many real-clock waiters on one key: every sleep is RetryAfter plus at
// most min(RetryAfter/8, 1ms), and RetryAfter > 0.
func TestReview4WaitContentionSleeps(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		e := new13(t, engine.Config{Limit: 2, Window: 4 * time.Millisecond, SubWindows: 4, Algorithm: alg})
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
