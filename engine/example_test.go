package engine_test

import (
	"fmt"
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
