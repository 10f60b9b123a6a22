package engine_test

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// Goroutines race AllowAll over two engines at one instant: every engine
// must hold exactly the units of the calls that were admitted (a refused
// call leaves nothing behind), and a sequential top-up afterwards reaches
// the tighter limit exactly (nothing was lost either).
func TestAllowAllConcurrent(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			a := newEngine(t, engine.Config{Limit: 50, Window: time.Second, Algorithm: alg, DisableEviction: true})
			b := newEngine(t, engine.Config{Limit: 30, Window: time.Minute, Algorithm: alg, DisableEviction: true})
			reqs := []engine.Request{{Engine: a, Key: "k", N: 1}, {Engine: b, Key: "k", N: 1}}
			const goroutines, calls = 8, 40
			admitted := make(chan int, goroutines)
			for range goroutines {
				go func() {
					k := 0
					for range calls {
						if i, _ := engine.AllowAll(t0, reqs...); i < 0 {
							k++
						}
					}
					admitted <- k
				}()
			}
			total := 0
			for range goroutines {
				select {
				case k := <-admitted:
					total += k
				case <-time.After(30 * time.Second):
					t.Fatal("AllowAll did not return")
				}
			}
			require.Equal(t, int64(50-total), a.AllowAt("k", 0, t0).Remaining, "a holds the admitted calls' units only")
			require.Equal(t, int64(30-total), b.AllowAt("k", 0, t0).Remaining, "b holds the admitted calls' units only")
			for {
				i, _ := engine.AllowAll(t0, reqs...)
				if i >= 0 {
					require.Equal(t, 1, i, "b, the tighter limit, refuses")
					break
				}
				total++
			}
			require.Equal(t, 30, total)
			require.Equal(t, int64(20), a.AllowAt("k", 0, t0).Remaining)
		})
	}
}

// Concurrent AllowAll over keys of engines of every algorithm, all at one
// instant: every key must end holding exactly the units of the admitted
// AllowAll calls (all or none), and never more than its limit.
func TestAllowAllConcurrentExact(t *testing.T) {
	algs := []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog}
	for round := 0; round < 20; round++ {
		var es []*engine.Engine
		lims := []int64{50, 37, 61, 44}
		for i, a := range algs {
			es = append(es, newEngineNoCloseCheck(t, engine.Config{Limit: lims[i], Window: time.Second, SubWindows: 4, Algorithm: a, DisableEviction: true}))
		}
		var admitted [4]atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 60; i++ {
					a, b := (g+i)%4, (g+2*i+1)%4
					if a == b {
						b = (b + 1) % 4
					}
					ia, ib := int64(1+i%2), int64(1+g%3)
					idx, d := engine.AllowAll(t0,
						engine.Request{Engine: es[a], Key: "k", N: ia},
						engine.Request{Engine: es[b], Key: "k", N: ib},
						engine.Request{Engine: es[a], Key: "k", N: 1})
					if idx == -1 {
						if !d.Allowed {
							t.Error("-1 not allowed")
						}
						admitted[a].Add(ia + 1)
						admitted[b].Add(ib)
					}
				}
			}(g)
		}
		wg.Wait()
		for i, e := range es {
			rem := e.AllowAt("k", 0, t0).Remaining
			if lims[i]-rem != admitted[i].Load() {
				t.Fatalf("round %d %v: holds %d units, admitted by AllowAll %d", round, algs[i], lims[i]-rem, admitted[i].Load())
			}
		}
	}
}

// Concurrent AllowAll calls with overlapping request sets at one instant
// per phase: each key's consumption must equal the units of the calls
// that returned −1 (all or nothing), never exceed the limit, and the
// audit of Strict and the log must show no false admit.
func TestAllowAllConcurrentOverlap(t *testing.T) {
	for _, algs := range [][2]engine.Algorithm{{engine.SlidingWindowStrict, engine.SlidingLog}, {engine.SlidingLog, engine.SlidingWindowStrict}, {engine.SlidingWindow, engine.FixedWindow}} {
		t.Run(fmt.Sprint(algs), func(t *testing.T) {
			es := []*engine.Engine{
				newEngineNoCloseCheck(t, engine.Config{Limit: 40, Window: time.Second, SubWindows: 4, Algorithm: algs[0], DisableEviction: true, Audit: 1}),
				newEngineNoCloseCheck(t, engine.Config{Limit: 30, Window: 2 * time.Second, SubWindows: 2, Algorithm: algs[1], DisableEviction: true, Audit: 1}),
			}
			keys := []string{"a", "b", "c"}
			for phase := 0; phase < 30; phase++ {
				now := t0.Add(time.Duration(phase) * 5 * time.Second)
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
				checkReportConsistent(t, r)
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
