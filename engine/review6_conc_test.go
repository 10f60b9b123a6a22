package engine_test

import (
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Concurrent Reserve/Cancel, AllowAll refusals (internal cancels) and
// AllowN on a few strict keys, real clock, optional CoarseClock: Strict
// must show no false admit; counts consistent; Unadmits ≤ cancels.
func TestReview6ConcurrentCancelStrict(t *testing.T) {
	for _, coarse := range []time.Duration{0, time.Millisecond} {
		for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
			e := advNew(t, engine.Config{Limit: 5, Window: 50 * time.Millisecond, SubWindows: 5, Algorithm: alg, Audit: 1, CoarseClock: coarse, AuditBuffer: 1 << 16})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var cancels int64
			stop := time.Now().Add(700 * time.Millisecond)
			for g := 0; g < 4; g++ {
				wg.Go(func() {
					rng := rand.New(rand.NewSource(int64(g)))
					var held []*engine.Reservation
					var c int64
					for time.Now().Before(stop) {
						k := []string{"a", "b"}[rng.Intn(2)]
						switch rng.Intn(5) {
						case 0:
							e.AllowN(k, 1+rng.Int63n(3))
						case 1, 2:
							r := new(engine.Reservation)
							*r = e.Reserve(k, 1+rng.Int63n(2))
							if r.Decision().Allowed {
								held = append(held, r)
							}
						case 3:
							if len(held) > 0 {
								j := rng.Intn(len(held))
								if held[j].Cancel() {
									c++
								}
								held = append(held[:j], held[j+1:]...)
							}
						case 4:
							idx, _ := engine.AllowAll(time.Now(), engine.Request{Engine: e, Key: "a", N: 1 + rng.Int63n(3)}, engine.Request{Engine: e, Key: "b", N: 1 + rng.Int63n(5)})
							if idx > 0 {
								c++
							}
						}
					}
					mu.Lock()
					cancels += c
					mu.Unlock()
				})
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					time.Sleep(3 * time.Millisecond)
					e.Audit()
				}
			}()
			wg.Wait()
			rep := e.Audit()
			t.Logf("coarse=%v %v %+v cancels=%d", coarse, alg, rep, cancels)
			advConsistent(t, rep)
			if rep.FalseAdmits != 0 {
				t.Errorf("coarse=%v %v: FalseAdmits %d (Dropped %d)", coarse, alg, rep.FalseAdmits, rep.Dropped)
			}
			if rep.Unadmits > cancels {
				t.Errorf("Unadmits %d > cancels %d", rep.Unadmits, cancels)
			}
		}
	}
}
