package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// SetLimitAt moves the key's time (it is "activity at now"). Moving it a
// multiple of 2^24 sub-windows (the slot tag's period) or past the 2^21
// retirement gap, then deciding there: the old units are far outside the
// window and must not be counted (tag aliasing).
func TestReview4SetLimitFarAliasing(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		for _, N := range []int{1, 3, 4} {
			for _, gap := range []int64{1 << 20, 1 << 21, 1 << 23, 1 << 24, 1<<24 + 1, 1 << 25, 3 << 24} {
				w := int64(time.Millisecond)
				W := time.Duration(w * int64(N))
				if alg == engine.FixedWindow {
					w = int64(W)
				}
				e := new13(t, engine.Config{Limit: 5, Window: W, SubWindows: N, Algorithm: alg, PerKeyLimits: true, DisableEviction: true})
				r := e.ReserveAt("k", 5, t13)
				far := t13.Add(time.Duration(gap * w))
				if err := e.SetLimitAt("k", 5, far); err != nil {
					t.Fatal(err)
				}
				d := e.AllowAt("k", 5, far)
				if !d.Allowed {
					t.Errorf("%v N=%d gap=%d: at the far time (after SetLimitAt there) the old units still count: %+v", alg, N, gap, d)
				}
				if r.Cancel() {
					t.Errorf("%v N=%d gap=%d: Cancel true far outside the window", alg, N, gap)
				}
				if rem := e.AllowAt("k", 0, far).Remaining; rem != 0 {
					t.Errorf("%v N=%d gap=%d: remaining %d after the far admit and old cancel", alg, N, gap, rem)
				}
			}
		}
	}
}
