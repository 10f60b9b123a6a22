package engine_test

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// AllowAll against its documented definition, executed by hand on a twin
// set of engines: ReserveAt each request in order, on the first denial
// cancel the earlier ones newest first. The outcomes, every key's
// Remaining afterwards, and the audit reports must be identical, for
// request counts around the stack/heap boundary and far beyond it.
func TestReview5AllowAllTwin(t *testing.T) {
	sizes := []int{0, 1, 2, 7, 8, 9, 10, 16, 17, 100, 1000}
	for seed := int64(1); seed <= scaled[int64](6, 30); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			mk := func() []*engine.Engine {
				var es []*engine.Engine
				for i, alg := range allAlgorithms {
					sub := []int{1, 3, 4, 10}[i]
					es = append(es, advNew(t, engine.Config{Limit: int64(5 + i*7), Window: time.Duration(600+100*i) * time.Millisecond / time.Duration(sub) * time.Duration(sub), SubWindows: sub,
						Algorithm: alg, DisableEviction: true, Audit: 1, PerKeyLimits: true}))
				}
				return es
			}
			A, B := mk(), mk()
			keys := []string{"a", "b", "c", "d"}
			now := adv5T0
			for step := 0; step < 150; step++ {
				now = now.Add(time.Duration(rng.Int63n(int64(150 * time.Millisecond))))
				if rng.Intn(10) == 0 {
					now = now.Add(-time.Duration(rng.Int63n(int64(300 * time.Millisecond))))
				}
				size := sizes[rng.Intn(len(sizes))]
				type rq struct {
					e   int
					key string
					n   int64
				}
				var rs []rq
				for i := 0; i < size; i++ {
					n := int64(rng.Intn(3))
					if size > 20 {
						n = int64(rng.Intn(2))
						if rng.Intn(size) == 0 {
							n = 2
						}
					}
					rs = append(rs, rq{rng.Intn(len(A)), keys[rng.Intn(len(keys))], n})
				}
				if rng.Intn(8) == 0 && size > 0 {
					rs[rng.Intn(size)].n = -1
				}
				ra := make([]engine.Request, size)
				for i, r := range rs {
					ra[i] = engine.Request{Engine: A[r.e], Key: r.key, N: r.n}
				}
				gi, gd := engine.AllowAll(now, ra...)
				// by hand
				res := make([]engine.Reservation, size)
				wi, wd := -1, engine.Decision{Allowed: true}
				first := true
				for i, r := range rs {
					res[i] = B[r.e].ReserveAt(r.key, r.n, now)
					d := res[i].Decision()
					if !d.Allowed {
						wi, wd = i, d
						for j := i - 1; j >= 0; j-- {
							res[j].Cancel()
						}
						break
					}
					if first || d.Remaining < wd.Remaining {
						wd, first = d, false
					}
				}
				if gi != wi || gd != wd {
					t.Fatalf("step %d size %d: AllowAll -> %d %+v, by hand %d %+v", step, size, gi, gd, wi, wd)
				}
				for i := range A {
					for _, k := range keys {
						da, db := A[i].AllowAt(k, 0, now), B[i].AllowAt(k, 0, now)
						if da != db {
							t.Fatalf("step %d: engine %d key %s: AllowAll leaves %+v, by hand %+v", step, i, k, da, db)
						}
					}
				}
				if rng.Intn(5) == 0 {
					// ordinary traffic
					i, k, n := rng.Intn(len(A)), keys[rng.Intn(len(keys))], int64(1+rng.Intn(3))
					A[i].AllowAt(k, n, now)
					B[i].AllowAt(k, n, now)
				}
			}
			for i := range A {
				ga, gb := A[i].Audit(), B[i].Audit()
				if ga != gb {
					t.Errorf("engine %d audit: AllowAll %+v\n by hand %+v", i, ga, gb)
				}
				if (i == 1 || i == 3) && ga.FalseAdmits != 0 {
					t.Errorf("engine %d (%v) false admits %+v", i, allAlgorithms[i], ga)
				}
			}
		})
	}
}
