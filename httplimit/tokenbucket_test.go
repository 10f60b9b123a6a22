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
	h := mustMiddleware(t, e, WithPolicy("bucket", 0)).Handler(okHandler)
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
