package engine_test

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A token bucket of 5 refilling at 10 per second, as
// rate.NewLimiter(10, 5) is: a burst of 5, then one unit every 100 ms.
func Example_tokenBucket() {
	e, err := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: 5})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := e.AllowAt("tenant-1", 5, t)
	fmt.Println(d.Allowed, d.Remaining)
	d = e.AllowAt("tenant-1", 1, t)
	fmt.Println(d.Allowed, d.RetryAfter)
	d = e.AllowAt("tenant-1", 1, t.Add(100*time.Millisecond))
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 0
	// false 100ms
	// true 0
}
