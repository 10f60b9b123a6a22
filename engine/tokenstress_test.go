package engine_test

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// The token bucket's stress checker: workers on a few hot keys move a
// ManualClock themselves, decide at jittered and older times, jump far
// ahead (which moves a key into a new ring), reserve and cancel, charge
// debts, and race a background sweeper and a Sweep loop that reclaim full
// buckets. Every admission is recorded with bounds of its effective time:
// no earlier than the time asked, no later than the clock after it (a
// key's base is never past the clock). At the end, for every key and every
// run of admissions sorted by that lower bound, the units must be at most
// Burst + ⌊D·Limit/Window⌋, D from the run's lowest lower bound to its
// highest upper bound: a sound check of the window bound whatever the
// exact effective times. Runs for -stress per shape (1 s by default).
func TestTokenBucketStress(t *testing.T) {
	if testing.Short() {
		t.Skip("stress: skipped with -short")
	}
	for ci, c := range []struct {
		limit  int64
		window time.Duration
		burst  int64
	}{{10, 100 * time.Millisecond, 4}, {7, time.Millisecond, 3}, {engine.MaxLimit, 1 << 59, 2}} {
		clk := engine.NewManualClock(t0)
		e := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: c.limit, Window: c.window, Burst: c.burst, Clock: clk, SweepInterval: time.Millisecond})
		tick := max(int64(c.window)/c.limit, 1)
		type rec struct{ lo, hi, n int64 }
		var mu sync.Mutex
		recs := make([][]rec, stressKeys)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // a Sweep loop beside the background sweeper
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					e.Sweep()
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
		deadline := time.Now().Add(*stressFor)
		var workers sync.WaitGroup
		for w := range stressWorkers {
			workers.Add(1)
			go func() {
				defer workers.Done()
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
				type held struct {
					r   engine.Reservation
					key int
					i   int
				}
				var mine [][]rec = make([][]rec, stressKeys)
				var hold []held
				for time.Now().Before(deadline) {
					for range stressOps {
						switch x := rng.IntN(100); {
						case x < 30:
							clk.Advance(time.Duration(rng.Int64N(tick + 1)))
						case x == 30 && clk.UnixNano() < stressTimeCap:
							clk.Advance(time.Duration(tick * 10_000)) // far: idle keys refill, busy ones move
						}
						k := rng.IntN(stressKeys)
						key := string(rune('a' + k))
						now := clk.UnixNano()
						at := now
						if rng.IntN(6) == 0 {
							at -= rng.Int64N(4*tick + 1)
						}
						n := rng.Int64N(c.burst) + 1
						switch y := rng.IntN(10); {
						case y < 6:
							if e.AllowAt(key, n, time.Unix(0, at)).Allowed {
								mine[k] = append(mine[k], rec{at, clk.UnixNano(), n})
							}
						case y < 8:
							r := e.ReserveAt(key, n, time.Unix(0, at))
							if r.Decision().Allowed {
								mine[k] = append(mine[k], rec{at, clk.UnixNano(), n})
								hold = append(hold, held{r, k, len(mine[k]) - 1})
							}
						case y < 9 && len(hold) > 0:
							h := hold[len(hold)-1] // the newest: the one most often given back
							hold = hold[:len(hold)-1]
							if h.r.Cancel() {
								mine[h.key][h.i].n = 0
							}
						default:
							_, _ = e.ChargeAt(key, n, time.Unix(0, at))
						}
					}
				}
				mu.Lock()
				for k := range mine {
					recs[k] = append(recs[k], mine[k]...)
				}
				mu.Unlock()
			}()
		}
		workers.Wait()
		close(stop)
		wg.Wait()
		total := int64(0)
		for k, rs := range recs {
			slices.SortFunc(rs, func(a, b rec) int { return int(min(max(a.lo-b.lo, -1), 1)) })
			rest := make([]int64, len(rs)+1) // rest[j]: the units of rs[j:]
			for j := len(rs) - 1; j >= 0; j-- {
				rest[j] = rest[j+1] + rs[j].n
			}
			for i := range rs {
				units, hi := int64(0), rs[i].hi
				for j := i; j < len(rs); j++ {
					units += rs[j].n
					hi = max(hi, rs[j].hi)
					bound := c.burst + floorMulDiv(hi-rs[i].lo, c.limit, int64(c.window))
					if units > bound {
						t.Fatalf("shape %d key %d: %d units with effective times in [%d, %d], the bound is %d", ci, k, units, rs[i].lo, hi, bound)
					}
					if units+rest[j+1] <= bound {
						break // no longer run from i can pass it
					}
				}
				total += rs[i].n
			}
		}
		if total == 0 {
			t.Fatalf("shape %d: nothing admitted", ci)
		}
	}
}
