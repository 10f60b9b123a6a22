package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestCoarseClockBoundInRealTime checks the bound Config.CoarseClock
// states, with the refreshes driven by hand over a manual "real" clock:
// with Λ the longest gap between two refreshes, Strict and the log admit
// at most Limit units in every real interval of length Window − Λ, and
// (what the old doc's "never opens early" denied) units do leave the
// window early in real time: Limit+1 admissions come closer than Window.
func TestCoarseClockBoundInRealTime(t *testing.T) {
	const (
		W    = 100 * time.Millisecond
		res  = 20 * time.Millisecond
		step = 250 * time.Microsecond
	)
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		for _, limit := range []int64{1, 3} {
			for _, delay := range []time.Duration{0, 5 * time.Millisecond} {
				t.Run(fmt.Sprintf("%v/L=%d/delay=%v", alg, limit, delay), func(t *testing.T) {
					testCoarseBound(t, alg, limit, W, res, delay, step)
				})
			}
		}
	}
}

func testCoarseBound(t *testing.T, alg engine.Algorithm, limit int64, W, res, delay, step time.Duration) {
	// The refreshes' phase is not the sub-window grid's, as in life.
	start := t0.Add(1750 * time.Microsecond)
	real := engine.NewManualClock(start)
	e, refresh, err := engine.NewDrivenCoarse(engine.Config{
		Limit: limit, Window: W, SubWindows: 25, Algorithm: alg, CoarseClock: res, DisableEviction: true,
	}, real)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(uint64(limit), uint64(delay)))
	// (Strict holds a unit up to one sub-window past W, so its sub-windows
	// are narrow here, 4ms: its early opening shows only beyond that.)
	// Refreshes at k·res plus a scheduling delay in [0, delay], on the
	// step grid; lambda is the longest gap actually produced.
	var lambda, lastRefresh time.Duration
	nextRefresh := res + time.Duration(rng.Int64N(int64(delay)/int64(step)+1))*step
	var admitted []time.Duration // real times since t0
	for now := time.Duration(0); now < 40*W; now += step {
		real.Set(start.Add(now))
		if now >= nextRefresh { // the refresh lands before this instant's decision
			refresh()
			lambda = max(lambda, now-lastRefresh)
			lastRefresh = now
			k := now/res + 1
			nextRefresh = k*res + time.Duration(rng.Int64N(int64(delay)/int64(step)+1))*step
		}
		// Sparse requests, at random instants: an admission mid-gap is
		// stamped with a lagging reading (greedy traffic is admitted at
		// the refreshes, with no lag).
		if rng.IntN(16) == 0 && e.Allow("k") {
			admitted = append(admitted, now)
		}
	}
	lambda = max(lambda, 40*W-lastRefresh)
	if lambda < res || lambda > res+delay+step {
		t.Fatalf("the driver made Λ = %v, want within [%v, %v]", lambda, res, res+delay+step)
	}
	early := false
	minGap := time.Duration(1 << 62)
	for i := int(limit); i < len(admitted); i++ {
		gap := admitted[i] - admitted[i-int(limit)]
		// Limit+1 admissions: never inside one real interval of length W − Λ.
		if gap <= W-lambda {
			t.Fatalf("admissions %d and %d are %v apart in real time, within W − Λ = %v (Λ = %v): the stated bound fails", i-int(limit), i, gap, W-lambda, lambda)
		}
		if gap < W {
			early = true
		}
		minGap = min(minGap, gap)
	}
	t.Logf("Λ = %v, closest Limit+1 admissions %v apart (W − Λ = %v)", lambda, minGap, W-lambda)
	if len(admitted) < 20*int(limit) {
		t.Fatalf("only %d admissions in 40 windows", len(admitted))
	}
	// Strict holds a unit until the end of its sub-window plus W, so with
	// refreshes exactly res apart (res dividing W) its stamps stay
	// apart (W + res) and it opens no earlier than W in real time; jitter in the
	// refreshes (a scheduling delay) makes it open early too.
	if !early && (alg == engine.SlidingLog || delay > 0) {
		t.Fatalf("no Limit+1 admissions closer than W in real time: the coarse clock's early opening, which the docs state, did not show")
	}
}

// TestCoarseClockAfterCloseKeepsPromises: after Close, the coarse clock's
// refresher is stopped, yet a full key's RetryAfter still comes true (the
// engine reads the precise clock), and time never runs backwards across
// the switch. On the old code the reading froze at Close and the key was
// refused for ever.
func TestCoarseClockAfterCloseKeepsPromises(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			real := engine.NewManualClock(t0)
			e, refresh, err := engine.NewDrivenCoarse(engine.Config{Limit: 2, Window: time.Second, Algorithm: alg, CoarseClock: time.Millisecond, DisableEviction: true}, real)
			if err != nil {
				t.Fatal(err)
			}
			real.Advance(300 * time.Millisecond)
			refresh()
			if d := e.AllowN("k", 2); !d.Allowed {
				t.Fatalf("first: %+v", d)
			}
			real.Advance(50 * time.Millisecond) // not refreshed: the reading lags by 50ms
			d := e.AllowN("k", 1)
			if d.Allowed || d.Reason() != engine.ReasonLimited {
				t.Fatalf("full key: %+v", d)
			}
			e.Close()
			refresh() // a late tick after Close changes nothing
			// Time moved on: the reading is now the precise one, 50ms on.
			if d2 := e.AllowN("k", 1); d2.Allowed || d2.RetryAfter != d.RetryAfter-50*time.Millisecond {
				t.Fatalf("after Close: %+v, want refused with RetryAfter %v (the precise clock, 50ms past the last reading)", d2, d.RetryAfter-50*time.Millisecond)
			}
			real.Advance(d.RetryAfter - 50*time.Millisecond)
			if d3 := e.AllowN("k", 1); !d3.Allowed {
				t.Fatalf("after Close, at the promised RetryAfter: %+v, want admitted", d3)
			}
		})
	}
}

// TestCoarseClockWaitReturnsAfterClose: Wait on a full key of a closed
// engine with a real coarse clock returns admitted. The context's
// deadline only ends the old code's endless polling; the verdict is the
// returned error, whatever the machine's speed.
func TestCoarseClockWaitReturnsAfterClose(t *testing.T) {
	e, err := engine.New(engine.Config{Limit: 1, Window: 5 * time.Millisecond, CoarseClock: time.Millisecond, DisableEviction: true})
	if err != nil {
		t.Fatal(err)
	}
	e.Allow("k")
	e.Close()
	for e.Allow("k") { // until the window is full at the frozen-or-not reading
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if d, err := e.Wait(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("Wait after Close: %+v, %v; want admitted", d, err)
	}
}
