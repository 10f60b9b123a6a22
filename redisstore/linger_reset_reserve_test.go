package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// With the longest linger: callers fill a key (concurrently, through the
// batcher), Reset forgets it, and the same callers then admit exactly the
// limit again, which is what Redis then holds.
func TestLingerResetForgetsBatchedAdmissions(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const limit = 100
	l := mustNew(t, c, engine.Config{Limit: limit, Window: time.Hour}, WithLinger(time.Millisecond))
	fill := func() int64 {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for range 20 {
					cx, cancel := context.Background(), context.CancelFunc(func() {})
					if g%2 == 0 {
						cx, cancel = context.WithTimeout(cx, time.Minute) // queued for a sender
					}
					d, err := l.AllowN(cx, "r", 1)
					cancel()
					if err != nil {
						t.Errorf("%+v %v", d, err)
					} else if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return admitted.Load()
	}
	for round := range 3 {
		if a := fill(); a != limit {
			t.Fatalf("round %d: %d admitted of 320 calls, want the limit %d", round, a, limit)
		}
		if st := storedUnits(t, c, l, "r"); st != limit {
			t.Fatalf("round %d: Redis holds %d, want %d", round, st, limit)
		}
		if err := l.Reset(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		if st := storedUnits(t, c, l, "r"); st != 0 {
			t.Fatalf("round %d: after Reset Redis holds %d", round, st)
		}
	}
}

// With the longest linger, Reserve and Cancel on one key beside batched
// AllowN callers (some leaving early): the key never holds more than its
// limit, and what Redis holds at the end is exactly the admissions less the
// units that Cancel reported given back, plus only calls whose error said
// Redis may have counted them.
func TestLingerReserveCancelBesideBatchedCallers(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const limit = 1000
	l := mustNew(t, c, engine.Config{Limit: limit, Window: time.Hour}, WithLinger(time.Millisecond))
	var allowAdm, resAdm, cancelled, mayCount atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 80 {
				cx, cancel := context.WithTimeout(context.Background(), time.Duration(500+(g*37+i*53)%5000)*time.Microsecond)
				d, err := l.AllowN(cx, "rc", 1)
				cancel()
				switch {
				case err == nil:
					if d.Allowed {
						allowAdm.Add(1)
					}
				case errors.Is(err, context.DeadlineExceeded):
					if strings.Contains(err.Error(), "may have counted") {
						mayCount.Add(1)
					}
				default:
					t.Errorf("AllowN: %+v %v", d, err)
				}
			}
		})
	}
	for g := range 4 {
		wg.Go(func() {
			for i := range 80 {
				r, err := l.Reserve(ctx, "rc", 2)
				if err != nil {
					t.Errorf("Reserve: %v", err)
					continue
				}
				if !r.Decision().Allowed {
					continue
				}
				resAdm.Add(2)
				if (g+i)%2 == 0 {
					ok, err := r.Cancel(ctx)
					if err != nil {
						t.Errorf("Cancel: %v", err)
					}
					if ok {
						cancelled.Add(2)
					}
				}
			}
		})
	}
	wg.Wait()
	l.batch.wait()
	stored := storedUnits(t, c, l, "rc")
	want := allowAdm.Load() + resAdm.Load() - cancelled.Load()
	t.Logf("allowed %d, reserved %d, cancelled %d, may have counted %d, stored %d, stats %+v", allowAdm.Load(), resAdm.Load(), cancelled.Load(), mayCount.Load(), stored, l.Stats())
	if stored < want || stored > want+mayCount.Load() {
		t.Errorf("Redis holds %d, want %d (+ up to %d that may have been counted)", stored, want, mayCount.Load())
	}
	if stored > limit {
		t.Errorf("Redis holds %d, above the limit %d", stored, limit)
	}
}
