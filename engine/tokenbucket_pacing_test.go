package engine_test

import (
	"context"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Pacing with an emission interval T that is not a whole number of ns
// (docs/design.md §11, "Exact in integers"). GCRA admits a unit at the
// least whole ns at or after its instant; a caller that arrives no later
// than the key's TAT keeps the TAT's fraction, so the k-th unit after the
// burst comes at ⌈t0 + k·T⌉ and nothing accumulates. A caller that comes
// back only at RetryAfter arrives after the TAT when Burst is 1 (the
// instant a unit fits is the TAT itself, rounded up), and each unit then
// starts from a whole ns: it loses ⌈T⌉ − T < 1 ns per unit, as any GCRA
// (and x/time/rate's bucket with burst 1) loses the time a caller is late.

// jumpClock is a WaitClock whose waits end at once by moving the clock to
// their end: a Wait loop on it runs at the instants the engine chose, with
// no real time and no second goroutine.
type jumpClock struct{ ns atomic.Int64 }

func (c *jumpClock) UnixNano() int64 { return c.ns.Load() }

func (c *jumpClock) After(d time.Duration) (<-chan struct{}, func()) {
	if d > 0 {
		c.ns.Add(int64(d))
	}
	ch := make(chan struct{})
	close(ch)
	return ch, func() {}
}

// ceilDiv is ⌈k·w/l⌉ for non-negative operands, exactly.
func ceilDiv(k, w, l int64) int64 {
	x := new(big.Int).Mul(big.NewInt(k), big.NewInt(w))
	q, r := new(big.Int).QuoRem(x, big.NewInt(l), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func newPacing(t *testing.T, limit int64, window time.Duration, burst int64, clk engine.Clock) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: limit, Window: window, Burst: burst, Clock: clk, DisableEviction: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// A caller that asks again exactly at RetryAfter: with Burst ≥ 2 the k-th
// unit after the burst comes at ⌈t0 + k·T⌉, no drift (TestTokenBucketNoDrift
// runs 200,000 units with Burst 7); with Burst 1 every unit comes ⌈T⌉ after
// the one before, a drift of ⌈T⌉ − T per unit, under 1 ns.
func TestTokenBucketPacingAtRetryAfter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []struct {
		limit  int64
		window time.Duration
		burst  int64
		units  int64
	}{
		{3, 10 * time.Nanosecond, 1, 3000},
		{3, 10 * time.Nanosecond, 2, 3000},
		{7, time.Millisecond, 1, 20_000},
		{7, time.Millisecond, 2, 20_000},
		{7, time.Millisecond, 5, 20_000},
	} {
		e := newPacing(t, c.limit, c.window, c.burst, engine.NewManualClock(time.Unix(0, t0)))
		if d := e.AllowAt("k", c.burst, time.Unix(0, t0)); !d.Allowed {
			t.Fatalf("%+v: burst refused: %+v", c, d)
		}
		now, prev := t0, t0
		ceilT := ceilDiv(1, int64(c.window), c.limit)
		for k := int64(1); k <= c.units; k++ {
			d := e.AllowAt("k", 1, time.Unix(0, now))
			if !d.Allowed {
				now += int64(d.RetryAfter)
				if d = e.AllowAt("k", 1, time.Unix(0, now)); !d.Allowed {
					t.Fatalf("%+v: unit %d refused at its RetryAfter: %+v", c, k, d)
				}
			}
			want := t0 + ceilDiv(k, int64(c.window), c.limit) // no drift
			if c.burst == 1 {
				want = prev + ceilT // each unit from a whole ns
			}
			if now != want {
				t.Fatalf("%+v: unit %d at t0+%d ns, want t0+%d ns", c, k, now-t0, want-t0)
			}
			prev = now
		}
	}
}

// Wait books ahead, so a Wait loop arrives before the TAT even with
// Burst 1: the k-th unit after the first is released at ⌈t0 + k·T⌉, with
// no drift, for any Burst.
func TestTokenBucketPacingWaitLoop(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, burst := range []int64{1, 2} {
		clk := &jumpClock{}
		clk.ns.Store(t0)
		const limit, window, units = 7, time.Millisecond, 20_000
		e := newPacing(t, limit, window, burst, clk)
		if _, err := e.Wait(context.Background(), "k", burst); err != nil {
			t.Fatal(err)
		}
		for k := int64(1); k <= units; k++ {
			if _, err := e.Wait(context.Background(), "k", 1); err != nil {
				t.Fatalf("burst %d: unit %d: %v", burst, k, err)
			}
			if got, want := clk.UnixNano()-t0, ceilDiv(k, int64(window), limit); got != want {
				t.Fatalf("burst %d: unit %d released at t0+%d ns, want t0+%d ns", burst, k, got, want)
			}
		}
	}
}
