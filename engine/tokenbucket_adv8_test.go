package engine_test

import (
	"math"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Contradicts, if it fails: design.md §11 "nothing overflows for any valid
// Limit, Window and Burst, and any n", at Burst = MaxLimit with the largest
// W' it allows (MaxLimit per 2^20 ns: T = 2^20/(2^40−1) ns).
func TestAdvTokenBucketHugeBurst(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := advCfg{engine.MaxLimit, 1 << 20, engine.MaxLimit}
	e := newAdv(t, c, engine.NewManualClock(at))
	if d := e.AllowAt("k", engine.MaxLimit, at); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("full burst: %+v", d)
	}
	if d := e.AllowAt("k", 1, at); d.Allowed || d.RetryAfter != 1 {
		t.Fatalf("one more: %+v, want RetryAfter 1ns", d)
	}
	per := advFloor(big.NewRat(engine.MaxLimit, 1<<20)) // units refilled per ns
	if d := e.AllowAt("k", per+1, at.Add(1)); d.Allowed {
		t.Fatalf("%d units 1 ns later: %+v", per+1, d)
	}
	if d := e.AllowAt("k", per, at.Add(1)); !d.Allowed {
		t.Fatalf("%d units 1 ns later refused: %+v", per, d)
	}
	if d := e.AllowAt("k", engine.MaxLimit, at.Add(1<<20)); d.Allowed {
		t.Fatalf("a full burst one Window after the burst, with 'per' taken at +1ns: %+v", d)
	}
	if d := e.AllowAt("k", engine.MaxLimit, at.Add(1<<21)); !d.Allowed {
		t.Fatalf("full again 2 Windows later: %+v", d)
	}
	r := e.ReserveAt("k", math.MaxInt64, at.Add(1<<22))
	if r.Decision().Allowed || r.Decision().RetryAfter != engine.Never {
		t.Fatalf("reserve MaxInt64: %+v", r.Decision())
	}
	r = e.ReserveAt("k", 1, at.Add(1<<22))
	if _, err := r.SettleAt(math.MaxInt64, at.Add(1<<22)); err == nil {
		t.Fatal("settle to MaxInt64 accepted")
	}
}

// Contradicts, if it fails: Reservation.Cancel doc ("Cancel is idempotent
// across copies, also when called concurrently: one call returns the units").
func TestAdvTokenBucketCancelCopiesOnce(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 200; i++ {
		e := newAdv(t, advCfg{7, time.Millisecond, 3}, engine.NewManualClock(at))
		r := e.ReserveAt("k", 2, at)
		var wins atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			cp := r
			wg.Add(1)
			go func() {
				defer wg.Done()
				if cp.Cancel() {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d copies cancelled", wins.Load())
		}
		if d := e.AllowAt("k", 0, at); d.Remaining != 3 {
			t.Fatalf("after one cancel: Remaining %d", d.Remaining)
		}
	}
}
