package engine_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func Example() {
	e, err := engine.New(engine.Config{Limit: 3, Window: time.Second})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	for i := 0; i < 4; i++ {
		fmt.Println(e.Allow("tenant-1"))
	}
	// Output:
	// true
	// true
	// true
	// false
}

// AllowAt takes the time from the caller, which makes decisions
// deterministic and saves the clock read.
func ExampleEngine_AllowAt() {
	e, _ := engine.New(engine.Config{Limit: 10, Window: time.Second, SubWindows: 10})
	defer e.Close()
	t := time.Unix(1_700_000_000, 0)
	fmt.Printf("%+v\n", e.AllowAt("api-key", 10, t))
	fmt.Printf("%+v\n", e.AllowAt("api-key", 1, t))
	// 1.05s later the first sub-window is half outside the window: half of
	// the 10 units still count.
	fmt.Printf("%+v\n", e.AllowAt("api-key", 5, t.Add(1050*time.Millisecond)))
	d := e.AllowAt("api-key", 20, t) // more than the limit: it never fits
	fmt.Println(d.Allowed, d.Reason(), d.RetryAfter == engine.Never)
	// Output:
	// {Allowed:true Limit:10 Remaining:0 RetryAfter:0s}
	// {Allowed:false Limit:10 Remaining:0 RetryAfter:1.01s}
	// {Allowed:true Limit:10 Remaining:0 RetryAfter:0s}
	// false never true
}

// Strict never lets any window of length Window hold more than Limit.
func ExampleConfig_strict() {
	e, _ := engine.New(engine.Config{Limit: 2, Window: time.Second, SubWindows: 4, Algorithm: engine.SlidingWindowStrict})
	defer e.Close()
	t := time.Unix(1_700_000_000, 0)
	fmt.Println(e.AllowAt("k", 2, t.Add(240*time.Millisecond)).Allowed)
	d := e.AllowAt("k", 1, t.Add(1100*time.Millisecond))
	fmt.Println(d.Allowed, d.RetryAfter) // the 2 count in full until their sub-window ends
	// Output:
	// true
	// false 150ms
}

func ExampleEngine_SetLimit() {
	e, _ := engine.New(engine.Config{
		Limit:  100,
		Window: time.Minute,
		// Called when a key's state is created; 0 means the default.
		KeyLimit: func(key string) int64 {
			if key == "enterprise" {
				return 10000
			}
			return 0
		},
	})
	defer e.Close()
	fmt.Println(e.AllowN("enterprise", 1).Limit, e.AllowN("free", 1).Limit)
	_ = e.SetLimit("free", 200) // keeps the unit already counted
	fmt.Println(e.AllowN("free", 0).Remaining)
	// Output:
	// 10000 100
	// 199
}

// AllowAll admits a request only if every limit has room, and consumes
// nothing when one refuses: here 10 per second and 1,000 per hour per
// tenant, two engines with different windows.
func ExampleAllowAll() {
	perSecond, _ := engine.New(engine.Config{Limit: 10, Window: time.Second})
	defer perSecond.Close()
	perHour, _ := engine.New(engine.Config{Limit: 1000, Window: time.Hour})
	defer perHour.Close()
	allow := func(tenant string, n int64, now time.Time) (int, engine.Decision) {
		return engine.AllowAll(now,
			engine.Request{Engine: perSecond, Key: tenant, N: n},
			engine.Request{Engine: perHour, Key: tenant, N: n})
	}

	t := time.Unix(1_700_000_000, 0)
	i, d := allow("acme", 10, t)
	fmt.Println(i, d.Allowed, d.Remaining) // −1: all admitted; the least Remaining
	i, d = allow("acme", 1, t)
	fmt.Println(i, d.Allowed, d.RetryAfter) // refused by the per-second limit

	// 10 every 1.1 s, 99 times more, reaches 1,000 in the hour.
	for s := 1; s < 100; s++ {
		if i, _ := allow("acme", 10, t.Add(time.Duration(s)*1100*time.Millisecond)); i >= 0 {
			fmt.Println("refused at", s)
		}
	}
	t = t.Add(100 * 1100 * time.Millisecond)
	i, d = allow("acme", 1, t)
	fmt.Println(i, d.Allowed) // refused by the per-hour limit...
	// ...and the per-second limit, which had room, was given its unit back.
	fmt.Println(perSecond.AllowAt("acme", 0, t).Remaining)
	// Output:
	// -1 true 0
	// 0 false 1.01s
	// 1 false
	// 10
}

// A Reservation takes units now and gives them back if the work they were
// for does not happen.
func ExampleEngine_ReserveAt() {
	e, _ := engine.New(engine.Config{Limit: 5, Window: time.Minute})
	defer e.Close()
	t := time.Unix(1_700_000_000, 0)

	r := e.ReserveAt("upload:acme", 3, t)
	fmt.Println(r.Decision().Allowed, r.Decision().Remaining)
	// The upload is rejected downstream: return the 3 units.
	fmt.Println(r.Cancel(), e.AllowAt("upload:acme", 0, t).Remaining)
	fmt.Println(r.Cancel()) // once only
	// Output:
	// true 2
	// true 5
	// false
}

// Wait sleeps on the engine's Clock. With a ManualClock the sleep ends when
// the clock is moved past it, which makes waiting deterministic in tests:
// Waits reports a sleeping waiter, Advance wakes it.
func ExampleEngine_Wait() {
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
	e, _ := engine.New(engine.Config{Limit: 1, Window: time.Second, Clock: clk})
	defer e.Close()
	fmt.Println(e.Allow("k"))

	go func() {
		for clk.Waits() == 0 {
			runtime.Gosched() // until Wait is asleep
		}
		clk.Advance(2 * time.Second)
	}()
	d, err := e.Wait(context.Background(), "k", 1)
	fmt.Println(d.Allowed, err)

	// A wait that would outlast the context's deadline returns at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err = e.Wait(ctx, "k", 1)
	fmt.Println(errors.Is(err, engine.ErrWaitExceedsDeadline))
	// Output:
	// true
	// true <nil>
	// true
}

// Config.Audit shadows a share of the keys with an exact sliding log, and
// Engine.Audit reports how often the engine's estimate disagreed with it on
// the live traffic.
func ExampleEngine_Audit() {
	e, _ := engine.New(engine.Config{
		Limit:      10,
		Window:     time.Second,
		SubWindows: 10,
		Audit:      1, // every key, for the example; 0.001 audits about one key in 1,000
		// The example's times are its own timeline, not the clock's.
		DisableEviction: true,
	})
	defer e.Close()
	t := time.Unix(1_700_000_000, 0)
	e.AllowAt("tenant", 10, t.Add(99*time.Millisecond)) // a burst at the end of a sub-window
	// 1.05 s later the estimate weighs that sub-window by half: 5 more fit,
	// although all 10 units are still inside the true window.
	fmt.Println(e.AllowAt("tenant", 5, t.Add(1050*time.Millisecond)).Allowed)
	r := e.Audit()
	fmt.Printf("%d decisions on %d key: %d false admit, %d false deny; worst window %.1f × the limit\n",
		r.Decisions, r.Keys, r.FalseAdmits, r.FalseDenies, r.WorstWindow)
	// Output:
	// true
	// 2 decisions on 1 key: 1 false admit, 0 false deny; worst window 1.5 × the limit
}
