package engine_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// extremeCase is one configuration of TestMatchesReferenceAtExtremes.
type extremeCase struct {
	L   int64
	N   int
	w   int64
	alg engine.Algorithm
}

func TestMatchesReferenceAtExtremes(t *testing.T) {
	limits := []int64{1, 2, 3, 7, 1000, engine.MaxLimit, engine.MaxLimit - 1, 1 << 39, 999_999_999_989}
	ns := []int{1, 2, 3, 7, 1000}
	widths := []int64{1, 3, 7, 999_999_937, 1 << 50, 1 << 57}
	rng := rand.New(rand.NewPCG(42, 7))
	seen := 0
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, L := range limits {
			if alg == engine.SlidingLog && L > 10_000 {
				continue
			}
			for _, N := range ns {
				for _, w := range widths {
					if w*int64(N) > int64(engine.MaxWindow) || w > int64(engine.MaxWindow)/int64(N) {
						continue
					}
					if (alg == engine.FixedWindow || alg == engine.SlidingLog) && N != 1 {
						continue
					}
					c := extremeCase{L, N, w, alg}
					name := fmt.Sprintf("%v/L=%d/N=%d/w=%d", alg, L, N, w)
					for seed := 0; seed < scaled(1, 3); seed++ {
						if err := runExtremeScript(c, rng); err != nil {
							t.Errorf("%s: %v", name, err)
							break
						}
						seen++
					}
				}
			}
		}
	}
	t.Logf("%d scripts", seen)
}

func runExtremeScript(c extremeCase, rng *rand.Rand) error {
	cfg := engine.Config{Limit: c.L, Window: time.Duration(c.w * int64(c.N)), SubWindows: c.N, Algorithm: c.alg, DisableEviction: true}
	if c.alg == engine.FixedWindow || c.alg == engine.SlidingLog {
		cfg.SubWindows = 0
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ref := newModel(cfg)
	W := int64(cfg.Window)
	w := W / int64(max(c.N, 1))
	if c.alg == engine.FixedWindow || c.alg == engine.SlidingLog {
		w = W
	}
	// Start somewhere between 1970 and the last few windows before 2262.
	var now int64
	switch rng.IntN(3) {
	case 0:
		now = 1_700_000_000_000_000_000 + rng.Int64N(w)
	case 1:
		now = rng.Int64N(w) // near 1970
	default:
		now = math.MaxInt64 - 6*W - rng.Int64N(w) // near 2262
		if now < 0 {
			now = rng.Int64N(w)
		}
	}
	keys := []string{"a", "b"}
	for i := 0; i < 150; i++ {
		switch rng.IntN(9) {
		case 0, 1:
		case 2:
			now -= rng.Int64N(2 * w)
		case 3:
			now += w
		case 4:
			now += rng.Int64N(w/2 + 1)
		case 5:
			now += W + rng.Int64N(w)
		case 6:
			now += w - 1
		default:
			now += rng.Int64N(w + 1)
		}
		if now < 0 {
			now = 0
		}
		if now > math.MaxInt64-3*W-3*w {
			return nil // stop before the edge of time
		}
		var n int64
		switch rng.IntN(8) {
		case 0:
			n = 0
		case 1:
			n = c.L
		case 2:
			n = c.L - 1
		case 3:
			n = c.L + 1
		case 4:
			n = -1
		case 5:
			n = 1 + rng.Int64N(c.L)
		default:
			n = 1 + rng.Int64N(min(c.L, 3))
		}
		if n == 0 && c.L == 1 {
			n = 1
		}
		key := keys[rng.IntN(2)]
		got := e.AllowAt(key, n, time.Unix(0, now))
		want := ref.decide(key, n, now)
		if got != want {
			return fmt.Errorf("step %d: AllowAt(%q, %d, %d)\n got %+v\nwant %+v", i, key, n, now, got, want)
		}
	}
	return nil
}

// The reference comparison with jumps near the tag and
// revive-gap boundaries (2^20, 2^21, 2^23, 2^24 sub-windows, and multiples
// of N+1 that keep hitting one slot), mixed with small steps and steps back.
func TestMatchesReferenceAcrossTagJumps(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		for _, N := range []int{1, 2, 3, 10} {
			if alg == engine.FixedWindow && N != 1 {
				continue
			}
			for _, w := range []int64{1, 7, 1000} {
				for seed := 0; seed < 6; seed++ {
					if err := runTagJumpScript(alg, N, w, rng); err != nil {
						t.Fatalf("%v N=%d w=%d: %v", alg, N, w, err)
					}
				}
			}
		}
	}
}

func runTagJumpScript(alg engine.Algorithm, N int, w int64, rng *rand.Rand) error {
	cfg := engine.Config{Limit: 3, Window: time.Duration(w * int64(N)), SubWindows: N, Algorithm: alg, DisableEviction: true}
	if alg == engine.FixedWindow {
		cfg.SubWindows = 0
		cfg.Window = time.Duration(w)
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ref := newModel(cfg)
	slots := int64(N) + 1
	if alg == engine.FixedWindow {
		slots = 1
	}
	jumps := []int64{1 << 20, 1<<20 - 1, 1<<20 + 1, 1<<21 - 1, 1 << 21, 1<<21 + 1, 1 << 23, 1<<24 - 1, 1 << 24, 1<<24 + 1,
		slots << 19, (slots << 20) / slots * slots, ((1 << 21) - 1) / slots * slots, (1 << 24) / slots * slots}
	now := int64(1 << 40)
	for i := 0; i < 300; i++ {
		switch rng.IntN(6) {
		case 0:
			now += jumps[rng.IntN(len(jumps))]*w + rng.Int64N(w)
		case 1:
			now -= rng.Int64N(3 * w)
		default:
			now += rng.Int64N(2 * w)
		}
		now = max(now, 0)
		n := []int64{0, 1, 1, 2, 3, 4}[rng.IntN(6)]
		got := e.AllowAt("k", n, time.Unix(0, now))
		want := ref.decide("k", n, now)
		if got != want {
			return fmt.Errorf("step %d: AllowAt(%d, %d)\n got %+v\nwant %+v", i, n, now, got, want)
		}
	}
	return nil
}

// The jump script of TestMatchesReferenceAcrossTagJumps (2^20, 2^21, 2^23, 2^24 sub-window
// jumps and multiples of N+1) at N = 1000 and N = 999, 1.
func TestReferenceTagJumpsAtWideN(t *testing.T) {
	rng := rand.New(rand.NewPCG(77, 1))
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict} {
		for _, N := range []int{1, 999, 1000} {
			for _, w := range []int64{1, 13} {
				for seed := 0; seed < scaled(1, 4); seed++ {
					if err := runTagJumpScript(alg, N, w, rng); err != nil {
						t.Fatalf("%v N=%d w=%d: %v", alg, N, w, err)
					}
				}
			}
		}
	}
}
