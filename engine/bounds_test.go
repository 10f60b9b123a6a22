package engine_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// Bounds of docs/design.md §1, checked on seeded traffic of every pattern, for
// several N, from the units each algorithm actually admitted (the true
// count in a window (t−W, t], as an exact sliding log would see it).

const boundsL = 100

var boundsWindow = 1200 * time.Millisecond // divisible by 1, 2, 10 and 60 sub-windows

// pattern returns request times (Unix ns, sorted) for one key, starting at
// a grid-aligned t0, over about d.
type pattern struct {
	name string
	gen  func(rng *rand.Rand, n int) []int64
}

func boundsPatterns(d time.Duration) []pattern {
	base := t0.Truncate(boundsWindow).UnixNano()
	poisson := func(mult float64) func(*rand.Rand, int) []int64 {
		return func(rng *rand.Rand, _ int) []int64 {
			rate := mult * boundsL / float64(boundsWindow) // per ns
			var ts []int64
			for t := float64(base); t < float64(base)+float64(d); t += rng.ExpFloat64() / rate {
				ts = append(ts, int64(t))
			}
			return ts
		}
	}
	return []pattern{
		{"poisson-0.5x", poisson(0.5)},
		{"poisson-1x", poisson(1)},
		{"poisson-2x", poisson(2)},
		{"on-off", func(rng *rand.Rand, _ int) []int64 {
			// 200ms at 10× the limit rate, then 800ms of silence.
			var ts []int64
			for cycle := int64(0); cycle*int64(boundsWindow) < int64(d); cycle++ {
				start := base + cycle*int64(boundsWindow) + rng.Int64N(int64(boundsWindow)/2)
				for i := 0; i < 2*boundsL; i++ {
					ts = append(ts, start+int64(i)*int64(time.Millisecond))
				}
			}
			return ts
		}},
		{"boundary-burst", func(rng *rand.Rand, _ int) []int64 {
			// L in the last millisecond of a window, L in the first of the next.
			var ts []int64
			for cycle := int64(1); cycle*int64(boundsWindow) < int64(d); cycle += 3 {
				edge := base + cycle*int64(boundsWindow)
				for i := int64(0); i < 2*boundsL; i++ {
					ts = append(ts, edge-int64(time.Millisecond)+i*int64(time.Millisecond)/boundsL)
				}
			}
			return ts
		}},
		{"end-of-sub-window", func(rng *rand.Rand, n int) []int64 {
			// L in the last nanosecond of a sub-window, then one request
			// every 10µs for a window and a sub-window: greedy admission
			// as the burst's weight decays.
			w := int64(boundsWindow) / int64(n)
			burst := base + w - 1
			ts := make([]int64, 0, boundsL+150_000)
			for i := 0; i < boundsL; i++ {
				ts = append(ts, burst)
			}
			for t := burst + 10_000; t < burst+int64(boundsWindow)+w; t += 10_000 {
				ts = append(ts, t)
			}
			return ts
		}},
	}
}

// admittedTimes replays ts through a fresh engine and returns the times of
// the admitted units.
func admittedTimes(t *testing.T, alg engine.Algorithm, n int, ts []int64) []int64 {
	e := newEngine(t, engine.Config{Limit: boundsL, Window: boundsWindow, SubWindows: n, Algorithm: alg, DisableEviction: true})
	var got []int64
	for _, s := range ts {
		if e.AllowAt("k", 1, time.Unix(0, s)).Allowed {
			got = append(got, s)
		}
	}
	return got
}

// windowCounts returns, for each admitted time (as a window's end), the
// units admitted in (t−W, t]: the maxima of the true count are at those ends.
func windowCounts(adm []int64, win int64) []int64 {
	counts := make([]int64, len(adm))
	lo := 0
	for i, t := range adm {
		for adm[lo] <= t-win {
			lo++
		}
		// Units at the same instant as t all count.
		hi := sort.Search(len(adm), func(j int) bool { return adm[j] > t })
		counts[i] = int64(hi - lo)
	}
	return counts
}

func TestBoundsOnSeededTraffic(t *testing.T) {
	d := 6 * time.Second
	if testing.Short() {
		d = 3 * time.Second
	}
	win := int64(boundsWindow)
	for _, p := range boundsPatterns(d) {
		for _, n := range []int{1, 2, 10, 60} {
			for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
				if alg == engine.FixedWindow && n != 1 {
					continue // fixed has no sub-windows
				}
				t.Run(fmt.Sprintf("%s/N=%d/%v", p.name, n, alg), func(t *testing.T) {
					ts := p.gen(rand.New(rand.NewPCG(uint64(n), 7)), n)
					adm := admittedTimes(t, alg, n, ts)
					counts := windowCounts(adm, win)
					w := win / int64(n)
					for i, c := range counts {
						switch alg {
						case engine.SlidingWindowStrict:
							require.LessOrEqual(t, c, int64(boundsL), "strict: %d units in the window ending at %d", c, adm[i])
						case engine.FixedWindow:
							require.LessOrEqual(t, c, int64(2*boundsL), "fixed: %d units in the window ending at %d", c, adm[i])
						case engine.SlidingWindow:
							// L plus what the oldest overlapping sub-window holds.
							oldest := adm[i]/w - int64(n)
							var co int64
							for _, s := range adm {
								if s/w == oldest {
									co++
								}
							}
							require.LessOrEqual(t, c, int64(boundsL)+co, "weighted: %d units in the window ending at %d, oldest sub-window holds %d", c, adm[i], co)
							require.Less(t, c, int64(2*boundsL))
						}
					}
					if p.name == "end-of-sub-window" && alg == engine.SlidingWindow {
						// The bound is tight: this pattern reaches 2L−1.
						require.Equal(t, int64(2*boundsL-1), slices.Max(counts))
					}
				})
			}
		}
	}
}

// The seed claimed "≤ (1+1/N)·L" for the weighted counter. Under smooth
// traffic (Poisson at twice the limit) that holds with room for N ≤ 10. For
// large N a sub-window's Poisson count often exceeds L/N, so the bound is
// only the proven L + c[oldest]; the test logs the measured ratio there
// rather than tuning seeds until it passes.
func TestWeightedUnderSmoothTraffic(t *testing.T) {
	win := int64(boundsWindow)
	gen := boundsPatterns(20 * time.Second)[2] // poisson-2x
	for _, n := range []int{1, 2, 10, 60} {
		worst := 0.0
		for seed := uint64(1); seed <= 5; seed++ {
			adm := admittedTimes(t, engine.SlidingWindow, n, gen.gen(rand.New(rand.NewPCG(seed, uint64(n))), n))
			for _, c := range windowCounts(adm, win) {
				worst = math.Max(worst, float64(c)/boundsL)
			}
		}
		claim := 1 + 1/float64(n)
		t.Logf("N=%d: worst window %.2f×L, seed's claim (1+1/N) = %.3f×L", n, worst, claim)
		if n <= 10 {
			require.LessOrEqual(t, worst, claim, "N=%d", n)
		}
		require.Less(t, worst, 2.0)
	}
}
