package engine_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Extreme times and windows: peek, reserve, cancel must restore the peek,
// never panic, and keep 0 ≤ Remaining ≤ Limit.
func TestReview4ExtremeReserveCancel(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	windows := []struct {
		W time.Duration
		N int
	}{{engine.MaxWindow, 512}, {engine.MaxWindow, 1}, {engine.MaxWindow / 4, 4}, {time.Nanosecond, 1}, {1000, 1000}, {time.Hour, 9 * 8}, {1 << 40, 1 << 9}}
	limits := []int64{1, 3, engine.MaxLimit}
	maxT := int64(math.MaxInt64)
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, wc := range windows {
			for _, L := range limits {
				if alg == engine.SlidingLog && L > 1000 {
					L = 1000
				}
				e, err := engine.New(engine.Config{Limit: L, Window: wc.W, SubWindows: wc.N, Algorithm: alg, DisableEviction: true, MaxLogLimit: 1000})
				if err != nil {
					t.Fatalf("%v %v %d: %v", alg, wc, L, err)
				}
				func() {
					defer e.Close()
					times := []int64{0, 1, maxT, maxT - 1, maxT - int64(wc.W), maxT / 2, int64(wc.W), 1 << 62}
					for i := 0; i < 400; i++ {
						var ts int64
						if rng.IntN(2) == 0 {
							ts = times[rng.IntN(len(times))] + rng.Int64N(1000) - 500
							if ts < 0 {
								ts = 0
							}
						} else {
							ts = rng.Int64N(maxT)
						}
						now := time.Unix(0, ts)
						key := fmt.Sprint("k", rng.IntN(3))
						n := 1 + rng.Int64N(min(L, 5))
						if rng.IntN(4) == 0 {
							n = L
						}
						var p0, p1 engine.Decision
						var r engine.Reservation
						var ok bool
						func() {
							defer func() {
								if x := recover(); x != nil {
									t.Fatalf("%v W=%v N=%d L=%d t=%d n=%d: panic %v", alg, wc.W, wc.N, L, ts, n, x)
								}
							}()
							p0 = e.AllowAt(key, 0, now)
							r = e.ReserveAt(key, n, now)
							ok = r.Cancel()
							p1 = e.AllowAt(key, 0, now)
						}()
						d := r.Decision()
						if d.Remaining < 0 || d.Remaining > d.Limit || p1.Remaining < 0 || p1.Remaining > p1.Limit {
							t.Fatalf("%v: remaining out of range %+v %+v", alg, d, p1)
						}
						if d.Allowed != ok {
							t.Fatalf("%v W=%v N=%d L=%d t=%d n=%d: allowed %v, immediate Cancel %v", alg, wc.W, wc.N, L, ts, n, d.Allowed, ok)
						}
						if p0.Remaining != p1.Remaining {
							t.Fatalf("%v W=%v N=%d L=%d t=%d n=%d: peek %d, after reserve+cancel %d (%+v)", alg, wc.W, wc.N, L, ts, n, p0.Remaining, p1.Remaining, d)
						}
						if rng.IntN(3) == 0 {
							e.AllowAt(key, n, now)
						}
					}
				}()
			}
		}
	}
}
