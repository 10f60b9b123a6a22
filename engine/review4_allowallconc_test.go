package engine_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Concurrent AllowAll over keys of engines of every algorithm, all at one
// instant: every key must end holding exactly the units of the admitted
// AllowAll calls (all or none), and never more than its limit.
func TestReview4AllowAllConcurrentExact(t *testing.T) {
	algs := []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog}
	for round := 0; round < 20; round++ {
		var es []*engine.Engine
		lims := []int64{50, 37, 61, 44}
		for i, a := range algs {
			es = append(es, new13(t, engine.Config{Limit: lims[i], Window: time.Second, SubWindows: 4, Algorithm: a, DisableEviction: true}))
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
					idx, d := engine.AllowAll(t13,
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
			rem := e.AllowAt("k", 0, t13).Remaining
			if lims[i]-rem != admitted[i].Load() {
				t.Fatalf("round %d %v: holds %d units, admitted by AllowAll %d", round, algs[i], lims[i]-rem, admitted[i].Load())
			}
		}
	}
}
