package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Adversarial review (issue 28): a bucket whose refill time is not whole
// seconds, and one whose T is not whole ns. docs/http.md: "w= the time to
// refill the bucket from empty, Burst·Window/Limit, when that is whole
// seconds", "an admitted t= the time until the bucket is full again, at most
// (Burst − r)·Window/Limit, rounded up; a 429's t= is the Retry-After, the
// least wait rounded up to whole seconds".
func TestAdvTokenBucketFieldsOddRates(t *testing.T) {
	// 3 per 10 s, Burst 1: refill 10/3 s, not whole: no w=.
	e, clk := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 3, Window: 10 * time.Second, Burst: 1})
	h := mustMiddleware(t, e, WithPolicy("b", 0)).Handler(okHandler)
	w := do(h, "192.0.2.1:1", nil)
	wantHeader(t, w.Header(), "Ratelimit-Policy", `"b";q=1`)
	wantHeader(t, w.Header(), "Ratelimit", `"b";r=0;t=4`)
	w = do(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second: %d", w.Code)
	}
	wantHeader(t, w.Header(), "Retry-After", "4")
	clk.Advance(10*time.Second/3 + 0) // 3333333333 ns < 10/3 s
	if w = do(h, "192.0.2.1:1", nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("before ⌈10/3 s⌉ ns: %d", w.Code)
	}
	clk.Advance(1)
	if w = do(h, "192.0.2.1:1", nil); w.Code != http.StatusOK {
		t.Fatalf("at ⌈10/3 s⌉ ns: %d", w.Code)
	}

	// 3 per 10 s, Burst 3: refill 10 s, w=10; after one, r=2 and t=⌈10/3⌉=4.
	e2, _ := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 3, Window: 10 * time.Second, Burst: 3})
	h2 := mustMiddleware(t, e2, WithPolicy("b", 0)).Handler(okHandler)
	w = do(h2, "192.0.2.1:1", nil)
	wantHeader(t, w.Header(), "Ratelimit-Policy", `"b";q=3;w=10`)
	wantHeader(t, w.Header(), "Ratelimit", `"b";r=2;t=4`)
}
