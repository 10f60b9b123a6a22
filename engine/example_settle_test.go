package engine_test

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// An LLM gateway's tokens-per-minute limit: each request reserves an
// estimate of its tokens (the prompt's, plus the most the reply may use)
// and settles to the count the response reports. A response that uses
// more than its estimate is charged all the same, past the limit: a debt
// that later requests wait out.
func ExampleReservation_Settle() {
	clk := engine.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tpm, err := engine.New(engine.Config{Limit: 10_000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict, Clock: clk})
	if err != nil {
		panic(err)
	}
	defer tpm.Close()

	// complete reserves estimate tokens for tenant, "calls the model",
	// which reports used tokens, and settles.
	complete := func(tenant string, estimate, used int64) {
		r := tpm.Reserve(tenant, estimate)
		if d := r.Decision(); !d.Allowed {
			fmt.Printf("estimate %5d: refused, retry in %v\n", estimate, d.RetryAfter)
			return
		}
		d, err := r.Settle(used)
		if err != nil {
			panic(err)
		}
		fmt.Printf("estimate %5d, used %5d: %5d tokens left\n", estimate, used, d.Remaining)
	}
	complete("tenant-42", 2_100, 700)   // the reply was short: 1,400 go back
	complete("tenant-42", 4_000, 9_000) // no cap on the reply: 5,000 more are charged
	complete("tenant-42", 2_100, 0)     // 300 left: refused until the window has moved on
	// Output:
	// estimate  2100, used   700:  9300 tokens left
	// estimate  4000, used  9000:   300 tokens left
	// estimate  2100: refused, retry in 1m6s
}

// A cost known only once the work is done, with nothing reserved: bytes
// served, charged after the response, past the limit if need be.
func ExampleEngine_ChargeAt() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := engine.New(engine.Config{Limit: 1 << 20, Window: time.Second, Algorithm: engine.SlidingWindowStrict, DisableEviction: true})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	for _, n := range []int64{300_000, 900_000} {
		d, err := e.ChargeAt("client-7", n, t0)
		if err != nil {
			panic(err)
		}
		fmt.Printf("served %d bytes: %d left, next byte allowed: %v\n", n, d.Remaining, d.Allowed)
	}
	fmt.Println(e.AllowAt("client-7", 1, t0.Add(1100*time.Millisecond)).Allowed) // Window plus a sub-window: the debt has left
	// Output:
	// served 300000 bytes: 748576 left, next byte allowed: true
	// served 900000 bytes: 0 left, next byte allowed: false
	// true
}
