package engine_test

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Concurrent AllowAll calls with overlapping request sets at one instant
// per phase: each key's consumption must equal the units of the calls
// that returned −1 (all or nothing), never exceed the limit, and the
// audit of Strict and the log must show no false admit.
func TestReview5AllowAllConcurrentOverlap(t *testing.T) {
	for _, algs := range [][2]engine.Algorithm{{engine.SlidingWindowStrict, engine.SlidingLog}, {engine.SlidingLog, engine.SlidingWindowStrict}, {engine.SlidingWindow, engine.FixedWindow}} {
		t.Run(fmt.Sprint(algs), func(t *testing.T) {
			es := []*engine.Engine{
				advNew(t, engine.Config{Limit: 40, Window: time.Second, SubWindows: 4, Algorithm: algs[0], DisableEviction: true, Audit: 1}),
				advNew(t, engine.Config{Limit: 30, Window: 2 * time.Second, SubWindows: 2, Algorithm: algs[1], DisableEviction: true, Audit: 1}),
			}
			keys := []string{"a", "b", "c"}
			for phase := 0; phase < 30; phase++ {
				now := adv5T0.Add(time.Duration(phase) * 5 * time.Second)
				var used [2][3]atomic.Int64
				var wg sync.WaitGroup
				for g := 0; g < 6; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						rng := rand.New(rand.NewSource(int64(phase*100 + g)))
						for it := 0; it < 60; it++ {
							m := 1 + rng.Intn(12)
							reqs := make([]engine.Request, m)
							type ek struct{ e, k int }
							idx := make([]ek, m)
							for i := range reqs {
								ei, ki := rng.Intn(2), rng.Intn(3)
								idx[i] = ek{ei, ki}
								reqs[i] = engine.Request{Engine: es[ei], Key: keys[ki], N: int64(1 + rng.Intn(3))}
							}
							if i, _ := engine.AllowAll(now, reqs...); i == -1 {
								for j, x := range idx {
									used[x.e][x.k].Add(reqs[j].N)
								}
							}
							if rng.Intn(4) == 0 {
								r := es[rng.Intn(2)].ReserveAt(keys[rng.Intn(3)], 1, now)
								r.Cancel()
							}
						}
					}(g)
				}
				wg.Wait()
				for ei, e := range es {
					lim := e.Config().Limit
					for ki, k := range keys {
						u := used[ei][ki].Load()
						rem := e.AllowAt(k, 0, now).Remaining
						if u > lim {
							t.Errorf("phase %d engine %d key %s: %d units admitted by AllowAll, limit %d", phase, ei, k, u, lim)
						}
						if lim-rem != u {
							t.Errorf("phase %d engine %d key %s: consumed %d, successful AllowAlls hold %d", phase, ei, k, lim-rem, u)
						}
						// fill: exactly rem more
						if d := e.AllowAt(k, rem, now); rem > 0 && !d.Allowed {
							t.Errorf("phase %d: fill of %d refused", phase, rem)
						}
						if d := e.AllowAt(k, 1, now); d.Allowed {
							t.Errorf("phase %d: over-fill admitted", phase)
						}
					}
				}
			}
			for i, e := range es {
				r := e.Audit()
				advConsistent(t, r)
				if algs[i] == engine.SlidingWindowStrict || algs[i] == engine.SlidingLog {
					if r.FalseAdmits != 0 || r.WorstWindow > 1 {
						t.Errorf("engine %d (%v): %+v", i, algs[i], r)
					}
				}
				t.Logf("%v: %+v", algs[i], r)
			}
		})
	}
}
