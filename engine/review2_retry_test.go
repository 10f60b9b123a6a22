package engine_test

// Adversarial review 2: RetryAfter from the caller's now, against the
// independent reference advRef (review_reference_test.go), with large
// clamping lags, n near the limit, limits near MaxLimit.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func TestAdv2RetryAfterHugeLags(t *testing.T) {
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
						if err := runAdv2Lags(alg, L, N, w, rng); err != nil {
							t.Fatalf("%v L=%d N=%d w=%d: %v", alg, L, N, w, err)
						}
					}
				}
			}
		}
	}
	t.Logf("%d scripts", scripts)
}

func runAdv2Lags(alg engine.Algorithm, L int64, N int, w int64, rng *rand.Rand) error {
	cfg := engine.Config{Limit: L, Window: time.Duration(w * int64(N)), SubWindows: N, Algorithm: alg, DisableEviction: true}
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		cfg.SubWindows = 0
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ref := newAdvRef(cfg)
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
		want, _ := ref.decide(key, n, t)
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
