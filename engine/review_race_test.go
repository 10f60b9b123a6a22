package engine_test

// Tests written by an adversarial review of the engine that had only the
// public API and the documented promises: ADV-n tests reproduce the defects
// it found (each failed before its fix), "Held" tests the attacks that did
// not break it.

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

type advAdm struct {
	key string
	eff int64
	n   int64
}

// Held (so far): writers at the present, far-ahead writers (≥ 2^21
// sub-windows), backward times, a Sweep loop beside the background sweeper,
// and SetLimit (log: Grow from a small KeyLimit), all on a few keys; every
// admission is checked by its effective epoch against the counting bounds.
// Writers never use a time older than the sweeper's now (see ADV-6 for
// what happens otherwise).
func TestAdvRaceBounds(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, N := range []int{1, 3} {
			if (alg == engine.FixedWindow || alg == engine.SlidingLog) && N != 1 {
				continue
			}
			t.Run(fmt.Sprintf("%v/N=%d", alg, N), func(t *testing.T) { advRaceBounds(t, alg, N) })
		}
	}
}

func advRaceBounds(t *testing.T, alg engine.Algorithm, N int) {
	const L = 4
	W := 30 * time.Millisecond
	cfg := engine.Config{Limit: L, Window: W, SubWindows: N, Algorithm: alg, SweepInterval: time.Millisecond, Shards: 2,
		KeyLimit: func(k string) int64 {
			if alg == engine.SlidingLog {
				return 1 // grown by SetLimit to L
			}
			return 0
		}}
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		cfg.SubWindows = 0
	}
	base := time.Unix(1_700_000_000, 0)
	clk := engine.NewManualClock(base)
	cfg.Clock = clk
	e := newEngine(t, cfg)
	w := int64(W) / int64(max(N, 1))
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		w = int64(W)
	}
	keys := []string{"a", "b", "c"}
	const G = 4
	recs := make([][]advAdm, G)
	now := base.UnixNano()
	for phase := 0; phase < 300; phase++ {
		var wg sync.WaitGroup
		for g := 0; g < G; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), uint64(phase)))
				for i := 0; i < 40; i++ {
					k := keys[rng.IntN(len(keys))]
					var at int64
					switch rng.IntN(20) {
					case 0:
						if g == 0 && phase%50 == 7 {
							at = now + (1<<21)*w + rng.Int64N(w) // far ahead
						} else {
							at = now
						}
					case 1, 2:
						at = now - rng.Int64N(3*w) // behind the clock: clamped (never creates, mostly)
						if at < now {
							at = now // keep writers at or after the sweeper's now
						}
					case 3:
						_ = e.SetLimit(k, L)
						continue
					case 4:
						if g == 1 {
							e.Sweep()
						}
						continue
					default:
						at = now + rng.Int64N(w)
					}
					n := 1 + rng.Int64N(2)
					d, eff := e.AllowAtTrace(k, n, time.Unix(0, at))
					if d.Allowed {
						recs[g] = append(recs[g], advAdm{k, eff, n})
					}
				}
			}()
		}
		wg.Wait()
		now += rand.Int64N(2 * w)
		if phase%37 == 0 {
			now += 5 * int64(W)
		}
		clk.Set(time.Unix(0, now))
	}
	// Check.
	by := map[string][]advAdm{}
	for _, r := range recs {
		for _, a := range r {
			by[a.key] = append(by[a.key], a)
		}
	}
	for k, as := range by {
		sort.Slice(as, func(i, j int) bool { return as[i].eff < as[j].eff })
		for i := range as {
			var span int64 // consecutive sub-windows / ns
			switch alg {
			case engine.SlidingWindowStrict:
				span = int64(N) + 1
			case engine.SlidingWindow:
				span = int64(N)
			case engine.FixedWindow:
				span = 1
			case engine.SlidingLog:
				span = int64(W) // (x−W, x]: eff > x−W
			}
			var sum int64
			for j := i; j >= 0; j-- {
				if as[i].eff-as[j].eff >= span {
					break
				}
				sum += as[j].n
			}
			require.LessOrEqual(t, sum, int64(L), "key %q: window ending at eff %d holds %d", k, as[i].eff, sum)
		}
	}
}

// Held (so far): concurrent bursts across sub-window boundaries leave no
// count behind: at quiescence, Remaining (a peek clamped to the start of the
// key's newest sub-window) equals Limit minus a recount of the admissions by
// effective epoch, and a sequential fill then admits exactly Remaining.
func TestAdvRaceBoundaryLeavesNoResidue(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		for _, N := range []int{1, 2, 5} {
			if alg == engine.FixedWindow && N != 1 {
				continue
			}
			t.Run(fmt.Sprintf("%v/N=%d", alg, N), func(t *testing.T) {
				const L = 64
				cfg := engine.Config{Limit: L, Window: time.Duration(N) * 1000, SubWindows: N, Algorithm: alg, DisableEviction: true}
				w := int64(1000)
				if alg == engine.FixedWindow {
					cfg.SubWindows = 0
				}
				for round := 0; round < 200; round++ {
					e, err := engine.New(cfg)
					require.NoError(t, err)
					base := int64(1<<40) / w * w
					var mu sync.Mutex
					var adm []advAdm
					var wg sync.WaitGroup
					for g := 0; g < 4; g++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							rng := rand.New(rand.NewPCG(uint64(g), uint64(round)))
							var mine []advAdm
							for i := 0; i < 60; i++ {
								// times around the boundaries of 3 consecutive sub-windows
								at := base + int64(rng.IntN(3))*w + []int64{0, w - 1, 1, w / 2}[rng.IntN(4)]
								n := 1 + rng.Int64N(3)
								d, eff := e.AllowAtTrace("k", n, time.Unix(0, at))
								if d.Allowed {
									mine = append(mine, advAdm{"k", eff, n})
								}
							}
							mu.Lock()
							adm = append(adm, mine...)
							mu.Unlock()
						}()
					}
					wg.Wait()
					var newest int64
					for _, a := range adm {
						newest = max(newest, a.eff)
					}
					span := int64(N) // Strict and weighted at offset 0 both count e−N … e in full
					if alg == engine.FixedWindow {
						span = 0
					}
					var used int64
					for _, a := range adm {
						if a.eff >= newest-span {
							used += a.n
						}
					}
					d := e.AllowAt("k", 0, time.Unix(0, 0)) // clamped to (newest, 0)
					require.Equal(t, max(0, L-used), d.Remaining, "round %d: Remaining after the burst", round)
					fill := int64(0)
					for e.AllowAt("k", 1, time.Unix(0, 0)).Allowed {
						fill++
					}
					require.Equal(t, d.Remaining, fill, "round %d: sequential fill", round)
					e.Close()
				}
			})
		}
	}
}
