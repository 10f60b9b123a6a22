package httplimit

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestFixedWindowAdmittedResetIsExact: an admitted response of a
// FixedWindow limiter says t= the exact time to the end of the
// Unix-aligned window (rounded up to whole seconds), not the whole window:
// before, it said t=3600 while the next 429 said t=2943. At each instant
// the reference is computed from the window arithmetic, and the denial
// that follows at the same instant must say the same.
func TestFixedWindowAdmittedResetIsExact(t *testing.T) {
	const window = time.Hour
	e, clk := newEngine(t, engine.Config{Algorithm: engine.FixedWindow, Window: window, Limit: 1})
	m := mustMiddleware(t, e, WithPolicy("fixed", 0), WithHeaders(HeadersDraft|HeadersLegacy))
	h := m.Handler(okHandler)
	start := t0.Truncate(window).Add(window) // a window start
	for n, off := range []time.Duration{
		0,                                 // the window's first instant: all of it
		657 * time.Second,                 // the 2943 s
		657*time.Second + time.Nanosecond, // rounded up
		window - time.Second,              // 1 s left
		window - time.Nanosecond,          // 1 ns left: t=1, never 0
	} {
		now := start.Add(time.Duration(n) * window).Add(off) // a fresh window per step
		clk.Set(now)
		left := now.Truncate(window).Add(window).Sub(now)
		want := strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)
		w := do(h, "192.0.2.1:1", nil)
		if w.Code != http.StatusOK {
			t.Fatalf("step %d: %d", n, w.Code)
		}
		wantHeader(t, w.Header(), "Ratelimit", `"fixed";r=0;t=`+want)
		wantHeader(t, w.Header(), "X-Ratelimit-Reset", want)
		w = do(h, "192.0.2.1:1", nil)
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("step %d: second request %d", n, w.Code)
		}
		wantHeader(t, w.Header(), "Ratelimit", `"fixed";r=0;t=`+want)
	}
}
