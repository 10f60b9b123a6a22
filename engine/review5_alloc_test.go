package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// AllowAll allocates nothing with ≤ 8 requests on existing keys, admitted
// or refused, for every algorithm, audited or not.
func TestReview5AllowAllAllocs(t *testing.T) {
	if raceOn13 {
		t.Skip("allocation counts are meaningless under -race")
	}
	for _, alg := range allAlgorithms {
		for _, audit := range []float64{0, 1} {
			for _, n := range []int{1, 2, 8} {
				t.Run(fmt.Sprintf("%v/audit=%v/%d", alg, audit, n), func(t *testing.T) {
					e := advNew(t, engine.Config{Limit: 1 << 20, Window: time.Second, Algorithm: alg, Audit: audit, DisableEviction: true, MaxLogLimit: 1 << 20})
					e2 := advNew(t, engine.Config{Limit: 3, Window: time.Second, Algorithm: alg, Audit: audit, DisableEviction: true})
					reqs := make([]engine.Request, n)
					for i := range reqs {
						reqs[i] = engine.Request{Engine: e, Key: fmt.Sprint("k", i%3), N: 1}
						e.AllowAt(reqs[i].Key, 0, adv5T0)
						e.AllowAt(reqs[i].Key, 1, adv5T0)
					}
					// Stop the audit's drain goroutine, whose allocations
					// AllocsPerRun would count; decisions still buffer.
					e.Close()
					e2.Close()
					now := adv5T0
					a := testing.AllocsPerRun(200, func() {
						now = now.Add(time.Microsecond)
						engine.AllowAll(now, reqs...)
					})
					if a != 0 {
						t.Errorf("admitted: %v allocs", a)
					}
					e2.AllowAt("full", 3, adv5T0)
					reqs[n-1] = engine.Request{Engine: e2, Key: "full", N: 1}
					a = testing.AllocsPerRun(200, func() {
						now = now.Add(time.Microsecond)
						engine.AllowAll(now, reqs...)
					})
					if a != 0 {
						t.Errorf("refused: %v allocs", a)
					}
				})
			}
		}
	}
}
