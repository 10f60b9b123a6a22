package engine_test

import (
	"context"
	"fmt"
	"math"
	randv1 "math/rand"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Times outside int64 Unix nanoseconds are judged by the time.Time: refused
// with RetryAfter Never, and the key is left untouched.
func TestUnrepresentableTimesAreRefused(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 2, Window: time.Hour, Algorithm: alg, DisableEviction: true})
			for _, bad := range []time.Time{
				time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), // UnixNano wraps to 2169
				time.Unix(-1, 0),
				time.Date(2262, 4, 11, 23, 47, 16, 854775808, time.UTC), // one past the last ns
				time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
			} {
				d := e.AllowAt("k", 1, bad)
				require.False(t, d.Allowed, bad.String())
				require.Equal(t, engine.Never, d.RetryAfter, bad.String())
				require.Zero(t, e.Len(), "%v created state", bad)
			}
			last := time.Date(2262, 4, 11, 23, 47, 16, 854775807, time.UTC)
			require.True(t, e.AllowAt("edge", 1, last).Allowed, "the last representable nanosecond")
			h := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := range 10 {
				require.True(t, e.AllowAt("k", 1, h.Add(time.Duration(i)*time.Hour)).Allowed, "hour %d", i)
			}
		})
	}
	clk := engine.NewManualClock(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEngine(t, engine.Config{Limit: 2, Window: time.Hour, Clock: clk, DisableEviction: true})
	d := e.AllowN("k", 1)
	require.Equal(t, engine.Never, d.RetryAfter, "a manual clock set before 1970 is refused")
	require.Zero(t, e.Len())
}

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

// Regression: A sweep while the engine's Clock reads a time outside 1970…2262
// (ManualClock.Set to such a time reads −1) must leave every key untouched:
// such a time is refused for decisions, and a key with counts inside its
// window must never be reclaimed. Here Sweep() reclaims live keys, and the
// next requests are admitted on a fresh state: a window of length W then
// holds 2·Limit under SlidingWindowStrict.
func TestSweepAtUnrepresentableClockKeepsLiveKeys(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, bad := range []time.Time{time.Unix(-1, 0), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)} {
			t.Run(alg.String()+"/"+bad.Format("2006"), func(t *testing.T) {
				t0 := time.Unix(1_700_000_000, 0)
				clk := engine.NewManualClock(t0)
				e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: alg, Clock: clk, SweepInterval: time.Hour})
				d := e.AllowN("k", 5)
				require.True(t, d.Allowed)
				require.False(t, e.AllowN("k", 1).Allowed, "full")

				clk.Set(bad) // e.g. a test clock briefly set to an invalid time
				require.Equal(t, engine.Never, e.AllowN("k", 1).RetryAfter, "a decision at that time is refused")
				n := e.Sweep()
				clk.Set(t0)

				assert.Zero(t, n, "Sweep at an unrepresentable clock reclaimed %d live key(s)", n)
				d = e.AllowN("k", 1)
				require.False(t, d.Allowed, "the window at t0 already holds 5 = Limit units; got %+v", d)
			})
		}
	}
}

// Regression: SetLimit while the engine's Clock reads a time outside 1970…2262
// (NewManualClock(time.Time{}) reads −1) must not create a state at a bogus
// time: it is an error that changes nothing, and SetLimitAt on the caller's
// own timeline is the way for a caller who drives AllowAt.
func TestSetLimitAtUnrepresentableClockChangesNothing(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(time.Time{}) // reads −1
			e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: alg, Clock: clk, PerKeyLimits: true})
			require.ErrorContains(t, e.SetLimit("k", 2), "before 1970 or after 2262")
			require.Zero(t, e.Len(), "a refused SetLimit creates nothing")
			t0 := time.Unix(1_700_000_000, 0)
			require.ErrorContains(t, e.SetLimitAt("k", 2, time.Time{}), "before 1970 or after 2262")
			require.NoError(t, e.SetLimitAt("k", 2, t0))
			for i := 0; i < 2; i++ {
				d := e.AllowAt("k", 1, t0)
				require.True(t, d.Allowed, "request %d: %+v", i, d)
				require.Equal(t, int64(2), d.Limit, "the SetLimit override is lost")
			}
			d := e.AllowAt("k", 1, t0)
			require.False(t, d.Allowed)
			// A minute later, the window is empty.
			d = e.AllowAt("k", 1, t0.Add(time.Minute))
			require.True(t, d.Allowed, "a minute later the window is empty, got %+v", d)
			require.Equal(t, int64(2), d.Limit, "the SetLimit override is lost")
			require.NoError(t, e.UpdateLimits(func(string, int64) int64 { return 3 }), "it creates nothing, so the clock does not matter")
		})
	}
}

// Regression: The README's recipe for a timeline of one's own: "set
// DisableEviction", and provision limits with SetLimitAt on that timeline.
// The key is then created on the caller's timeline, not at the engine's
// Clock: a replay of an older timeline is not clamped forward to the
// clock's sub-window, and a later one does not retire it at the first
// request and lose the override.
func TestSetLimitAtCreatesNewKeyOnCallerTimeline(t *testing.T) {
	for _, tc := range []struct {
		name string
		t0   time.Time
	}{
		{"replay-2020", time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"simulate-2035", time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Default (real) clock, as the README allows with DisableEviction.
			e := newEngine(t, engine.Config{Limit: 100, Window: time.Second, PerKeyLimits: true, DisableEviction: true})
			require.NoError(t, e.SetLimitAt("tenant", 3, tc.t0)) // provision before traffic
			for i := 0; i < 20; i++ {
				at := tc.t0.Add(time.Duration(i) * 500 * time.Millisecond) // 2 per window < 3
				d := e.AllowAt("tenant", 1, at)
				require.Equal(t, int64(3), d.Limit, "request %d: override lost", i)
				require.True(t, d.Allowed, "request %d at %v: 2 per second under a limit of 3, got %+v", i, at, d)
			}
		})
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestManualClockAfter(t *testing.T) {
	clk := engine.NewManualClock(t0)
	ch0, stop0 := clk.After(0)
	if !closed(ch0) || clk.Waits() != 0 {
		t.Fatal("After(0)")
	}
	stop0()
	chn, _ := clk.After(-time.Second)
	if !closed(chn) {
		t.Fatal("After(<0)")
	}
	ch, stop := clk.After(time.Second)
	if closed(ch) || clk.Waits() != 1 {
		t.Fatal("After(1s)")
	}
	clk.Advance(time.Second - 1)
	if closed(ch) {
		t.Fatal("early")
	}
	clk.Set(t0) // backwards
	clk.Advance(time.Second - 1)
	if closed(ch) {
		t.Fatal("early after set back")
	}
	clk.Advance(1)
	if !closed(ch) || clk.Waits() != 0 {
		t.Fatal("not closed at its end")
	}
	stop()
	stop()
	ch2, stop2 := clk.After(time.Hour)
	stop2()
	stop2()
	if clk.Waits() != 0 || closed(ch2) {
		t.Fatalf("stop: waits %d", clk.Waits())
	}
	// A long wait must not wrap around int64.
	ch3, stop3 := clk.After(math.MaxInt64)
	defer stop3()
	clk.Advance(time.Nanosecond)
	if closed(ch3) {
		t.Errorf("After(MaxInt64) closed after 1ns: the end wrapped around int64")
	}
	ch4, stop4 := clk.After(engine.Never)
	defer stop4()
	clk.Advance(time.Hour)
	if closed(ch4) {
		t.Errorf("After(Never) closed after an hour")
	}
}

func TestManualClockConcurrent(t *testing.T) {
	clk := engine.NewManualClock(t0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				ch, stop := clk.After(time.Duration(1 + i%7))
				if i%3 == 0 {
					stop()
					continue
				}
				clk.Advance(time.Duration(i % 5))
				if i%2 == 0 {
					<-ch
				}
				stop()
			}
		}(g)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				clk.Advance(1)
			}
		}
	}()
	wg.Wait()
	close(done)
	if clk.Waits() != 0 {
		t.Errorf("waits left: %d", clk.Waits())
	}
}

// One sequential caller, real time through CoarseClock, Reserve/Cancel,
// AllowN, AllowAll refusals, SetLimit: Strict/log never show a false admit.
func TestCoarseClockSequentialNoFalseAdmit(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 4, Window: 20 * time.Millisecond, SubWindows: 4, Algorithm: alg, Audit: 1, CoarseClock: 100 * time.Microsecond, PerKeyLimits: true})
		rng := randv1.New(randv1.NewSource(1))
		var held []*engine.Reservation
		var cancels int64
		stop := time.Now().Add(time.Second)
		for time.Now().Before(stop) {
			switch rng.Intn(7) {
			case 0:
				e.AllowN("a", 1+rng.Int63n(3))
			case 1, 2:
				r := new(engine.Reservation)
				*r = e.Reserve("a", 1+rng.Int63n(2))
				if r.Decision().Allowed {
					held = append(held, r)
				}
			case 3, 4:
				if len(held) > 0 {
					j := rng.Intn(len(held))
					if held[j].Cancel() {
						cancels++
					}
					held = append(held[:j], held[j+1:]...)
				}
			case 5:
				engine.AllowAll(time.Now(), engine.Request{Engine: e, Key: "a", N: 1 + rng.Int63n(2)}, engine.Request{Engine: e, Key: "a", N: 1 + rng.Int63n(4)})
			case 6:
				if rng.Intn(20) == 0 {
					if r := e.Audit(); r.Entries > 4 {
						t.Errorf("%v: Entries %d > L = 4 for the only key: %+v", alg, r.Entries, r)
						return
					}
				}
			}
			if rng.Intn(200) == 0 {
				time.Sleep(time.Duration(rng.Intn(3000)) * time.Microsecond)
			}
		}
		rep := e.Audit()
		t.Logf("%v %+v", alg, rep)
		checkReportConsistent(t, rep)
		if rep.FalseAdmits != 0 {
			t.Errorf("%v: FalseAdmits %d (Dropped %d)", alg, rep.FalseAdmits, rep.Dropped)
		}
	}
}
