package engine_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// Probe: RetryAfter near the end of representable time. A denial whose wait
// ends past 2262-04-11T23:47:16.854775807Z names an instant at which the
// request is refused as a bad time: the request can never fit, yet
// RetryAfter is not Never.
func TestRetryAfterPast2262(t *testing.T) {
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
func TestRetryAfterSaturates(t *testing.T) {
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

func TestRetryAfterAtHugeLagsMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 99))
	scripts := 0
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, L := range []int64{1, 2, 5, 1000, engine.MaxLimit, engine.MaxLimit - 1} {
			if alg == engine.SlidingLog && L > 1000 {
				continue
			}
			for _, N := range []int{1, 3, 1000} {
				if (alg == engine.FixedWindow || alg == engine.SlidingLog) && N != 1 {
					continue
				}
				for _, w := range []int64{1, 7, 1_000_003, 1 << 40} {
					if w*int64(N) > int64(engine.MaxWindow) {
						continue
					}
					for seed := 0; seed < scaled(1, 4); seed++ {
						scripts++
						if err := runClampLagScript(alg, L, N, w, rng); err != nil {
							t.Fatalf("%v L=%d N=%d w=%d: %v", alg, L, N, w, err)
						}
					}
				}
			}
		}
	}
	t.Logf("%d scripts", scripts)
}

func runClampLagScript(alg engine.Algorithm, L int64, N int, w int64, rng *rand.Rand) error {
	cfg := engine.Config{Limit: L, Window: time.Duration(w * int64(N)), SubWindows: N, Algorithm: alg, DisableEviction: true}
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		cfg.SubWindows = 0
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ref := newModel(cfg)
	W := int64(cfg.Window)
	var now int64
	switch rng.IntN(3) {
	case 0:
		now = 1_700_000_000_000_000_000 + rng.Int64N(W)
	case 1:
		now = rng.Int64N(W)
	default:
		now = math.MaxInt64 - 8*W - rng.Int64N(W)
		if now < 0 {
			now = rng.Int64N(W)
		}
	}
	newest := now
	for i := 0; i < 60; i++ {
		var t int64
		switch rng.IntN(6) {
		case 0: // far back: a huge clamping lag
			t = newest - rng.Int64N(newest/2+1)
		case 1:
			t = 0
		case 2:
			t = newest - rng.Int64N(3*W+1)
		case 3:
			newest += w - 1
			t = newest
		default:
			newest += rng.Int64N(w/2 + 1)
			t = newest
		}
		if t < 0 {
			t = 0
		}
		if newest > math.MaxInt64-3*W-3*w {
			return nil
		}
		var n int64
		switch rng.IntN(6) {
		case 0:
			n = L
		case 1:
			n = max(1, L-1)
		case 2:
			n = 1 + rng.Int64N(L)
		default:
			n = 1 + rng.Int64N(min(L, 3))
		}
		key := "k"
		got := e.AllowAt(key, n, time.Unix(0, t))
		want := ref.decide(key, n, t)
		if got != want {
			return fmt.Errorf("step %d: AllowAt(%d, t=%d) newest=%d\n got %+v\nwant %+v", i, n, t, newest, got, want)
		}
		if !got.Allowed && got.RetryAfter != engine.Never {
			// The retry at t+RetryAfter must fit (peek), and at one ns
			// less it must not (if representable).
			at := t + int64(got.RetryAfter)
			if at >= 0 {
				if p := e.AllowAt(key, 0, time.Unix(0, at)); p.Remaining < n {
					return fmt.Errorf("step %d: retry at t+%v has Remaining %d < n=%d", i, got.RetryAfter, p.Remaining, n)
				}
			}
		}
	}
	return nil
}

// Regression: Decision.RetryAfter is documented as "the least wait after which
// this same request fits if no other traffic arrives for the key". For a
// request whose now is older than the key's newest sub-window (clamped to
// that sub-window's start), RetryAfter is measured from the clamped instant,
// not from now: retrying at now+RetryAfter is refused again, for every
// algorithm. (The reference model once made the same choice, so the
// model comparisons could not see it; it now counts from now too.)
func TestRetryAfterOfClampedRequestIsLongEnough(t *testing.T) {
	base := time.Unix(1_700_000_000, 0) // on every grid used here
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 1, Window: time.Second, SubWindows: 10, Algorithm: alg, DisableEviction: true})
			require.True(t, e.AllowAt("k", 1, base.Add(1050*time.Millisecond)).Allowed)
			now := base.Add(400 * time.Millisecond) // a late, out-of-order arrival
			d := e.AllowAt("k", 1, now)
			require.False(t, d.Allowed)
			require.NotEqual(t, engine.Never, d.RetryAfter)
			retry := e.AllowAt("k", 1, now.Add(d.RetryAfter))
			require.True(t, retry.Allowed, "denied at now=%v with RetryAfter %v; retrying at now+RetryAfter is refused again: %+v",
				now.Sub(base), d.RetryAfter, retry)
		})
	}
}
