package engine_test

// Tests written by a second adversarial review of the engine (public API
// and documented promises): ADV2-n tests reproduce the defects it found,
// each failing before its fix; "Held" tests the attacks that did not break
// it.

import (
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Probe: RetryAfter near the end of representable time. A denial whose wait
// ends past 2262-04-11T23:47:16.854775807Z names an instant at which the
// request is refused as a bad time: the request can never fit, yet
// RetryAfter is not Never.
func TestAdv2RetryAfterPast2262(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 1, Window: time.Hour, SubWindows: 10, Algorithm: alg, DisableEviction: true})
			last := time.Unix(0, math.MaxInt64-int64(time.Minute))
			if !e.AllowAt("k", 1, last).Allowed {
				t.Fatal("first")
			}
			d := e.AllowAt("k", 1, last)
			retry := last.Add(d.RetryAfter)
			r := e.AllowAt("k", 1, retry)
			t.Logf("denied: %+v (%v); retry at %v: %+v (%v)", d, d.Reason(), retry, r, r.Reason())
			if d.RetryAfter != engine.Never && !r.Allowed {
				t.Errorf("RetryAfter %v names an instant past 2262 where the request is refused (%v); it can never fit, so the promise says Never", d.RetryAfter, r.Reason())
			}
		})
	}
}

// Probe: saturation in late() when the clamp lag is ~2^63: key newest at
// the last Fixed window ending exactly at MaxInt64 ns, a request at 1970.
func TestAdv2RetryAfterSaturation(t *testing.T) {
	const W = 7 // 7 divides 2^63−1
	e := newEngine(t, engine.Config{Limit: 1, Window: W, Algorithm: engine.FixedWindow, DisableEviction: true})
	l := int64(math.MaxInt64) - W // the last whole window: [MaxInt64−7, MaxInt64); the next opens at MaxInt64, a valid time
	if !e.AllowAt("k", 1, time.Unix(0, l)).Allowed {
		t.Fatal("first")
	}
	d := e.AllowAt("k", 1, time.Unix(0, 0))
	fit := l + W // the next window opens here (≤ MaxInt64)
	t.Logf("l=%d fit=%d MaxInt64=%d d=%+v (%v) want RetryAfter=%d", l, fit, int64(math.MaxInt64), d, d.Reason(), fit)
	r := e.AllowAt("k", 0, time.Unix(0, int64(d.RetryAfter))) // the retry the caller makes, as a peek
	t.Logf("peek at 0+RetryAfter: %+v; at MaxInt64: %+v", r, e.AllowAt("k", 0, time.Unix(0, fit)))
	if int64(d.RetryAfter) != fit {
		t.Errorf("RetryAfter %d, want %d (exact: fits at %d ns)", int64(d.RetryAfter), fit, fit)
	}
}
