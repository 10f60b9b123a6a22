package engine_test

import (
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Real clock, tiny window, the background sweeper reclaiming the key
// whenever it goes idle, Reserve/Cancel from several goroutines with
// pauses. Strict/fixed/log bounds over the live units (by At()).
func TestReview4RealClockStormWithSweeper(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		const L = 5
		N := 2
		W := 2 * time.Millisecond
		e := new13(t, engine.Config{Limit: L, Window: W, SubWindows: N, Algorithm: alg, SweepInterval: time.Millisecond, Shards: 1})
		type ent struct {
			r  engine.Reservation
			ok bool
		}
		var mu sync.Mutex
		var all []*ent
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 5))
				var mine []*ent
				for i := 0; i < 3000; i++ {
					if rng.IntN(60) == 0 {
						time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
					}
					if rng.IntN(2) == 0 || len(mine) == 0 {
						en := &ent{}
						en.r = e.Reserve("k", 1+rng.Int64N(2))
						if en.r.Units() > 0 {
							mine = append(mine, en)
						}
					} else {
						en := mine[len(mine)-1-rng.IntN(min(len(mine), 5))]
						if en.r.Cancel() {
							en.ok = true
						}
					}
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}(g)
		}
		wg.Wait()
		live := map[int64]int64{}
		w := int64(W) / int64(N)
		for _, en := range all {
			if en.ok {
				continue
			}
			at := en.r.At().UnixNano()
			switch alg {
			case engine.SlidingWindowStrict:
				at /= w
			case engine.FixedWindow:
				at /= int64(W)
			}
			live[at] += en.r.Units()
		}
		keys := make([]int64, 0, len(live))
		for k := range live {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		for i, k := range keys {
			var sum int64
			for j := i; j >= 0; j-- {
				x := keys[j]
				in := false
				switch alg {
				case engine.SlidingLog:
					in = x > k-int64(W)
				case engine.FixedWindow:
					in = x == k
				default:
					in = x >= k-int64(N)
				}
				if !in {
					break
				}
				sum += live[x]
			}
			if sum > L {
				t.Fatalf("%v: window ending at %d holds %d live units > %d", alg, k, sum, L)
			}
		}
		t.Logf("%v: %d reservations, evicted %d", alg, len(all), e.Stats().Evicted)
	}
}
