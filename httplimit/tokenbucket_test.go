package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A TokenBucket engine's fields, per draft-09 and parsed as RFC 9651
// lists: q= the Burst, w= the time to refill from empty (20 at 10 per
// second: 2 s), r= the whole units left, an admitted t= the time until
// the bucket is full again (rounded up), and on a 429 t= and Retry-After
// the least wait, rounded up.
func TestTokenBucketFields(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: 20})
	h := mustMiddleware(t, e, WithPolicyName("bucket", 0)).Handler(okHandler)
	w := do(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	wantHeader(t, w.Header(), "Ratelimit-Policy", `"bucket";q=20;w=2`)
	wantHeader(t, w.Header(), "Ratelimit", `"bucket";r=19;t=1`) // one unit refills in 100 ms
	checkMembers(t, w.Header(), []string{"bucket"}, []int64{20}, []int64{19})
	for range 18 {
		do(h, "192.0.2.1:1", nil)
	}
	w = do(h, "192.0.2.1:1", nil)
	wantHeader(t, w.Header(), "Ratelimit", `"bucket";r=0;t=2`) // empty: 2 s to refill
	w = do(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("21st request: %d", w.Code)
	}
	wantHeader(t, w.Header(), "Retry-After", "1") // 100 ms, rounded up
	wantHeader(t, w.Header(), "Ratelimit", `"bucket";r=0;t=1`)
	checkMembers(t, w.Header(), []string{"bucket"}, []int64{20}, []int64{0})
	clk.Advance(100*time.Millisecond - 1)
	if w = do(h, "192.0.2.1:1", nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("1 ns before the unit refills: %d", w.Code)
	}
	clk.Advance(1)
	if w = do(h, "192.0.2.1:1", nil); w.Code != http.StatusOK {
		t.Fatalf("when the unit refills: %d", w.Code)
	}
}

// A bucket whose refill time is not whole seconds, and one whose T is not
// whole ns. docs/http.md: "w= the time to
// refill the bucket from empty, Burst·Window/Limit, when that is whole
// seconds", "an admitted t= the time until the bucket is full again, at most
// (Burst − r)·Window/Limit, rounded up; a 429's t= is the Retry-After, the
// least wait rounded up to whole seconds".
func TestTokenBucketFieldsOddRates(t *testing.T) {
	// 3 per 10 s, Burst 1: refill 10/3 s, not whole: no w=.
	e, clk := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 3, Window: 10 * time.Second, Burst: 1})
	h := mustMiddleware(t, e, WithPolicyName("b", 0)).Handler(okHandler)
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
	h2 := mustMiddleware(t, e2, WithPolicyName("b", 0)).Handler(okHandler)
	w = do(h2, "192.0.2.1:1", nil)
	wantHeader(t, w.Header(), "Ratelimit-Policy", `"b";q=3;w=10`)
	wantHeader(t, w.Header(), "Ratelimit", `"b";r=2;t=4`)
}
