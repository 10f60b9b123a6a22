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

// Every Cancel that gives units back is an Unadmit ("Unadmits counts the
// cancels that gave units back"). Goroutines reserve and cancel on shared
// sampled keys; mode picks Reserve/Cancel or AllowAll.
func TestReview4AuditUnadmitsMatchCancels(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, mode := range []string{"reserve", "allowall", "emulated"} {
			t.Run(fmt.Sprint(alg, "/", mode), func(t *testing.T) {
				clk := engine.NewManualClock(advT0)
				e := advNew(t, engine.Config{Limit: 30, Window: 50 * time.Millisecond, SubWindows: 5, Algorithm: alg,
					Audit: 1, Clock: clk, DisableEviction: true, AuditBuffer: 1 << 16})
				var cancels, allowAllCancels, failedCancels atomic.Int64
				var wg sync.WaitGroup
				for w := range 4 {
					wg.Go(func() {
						rng := rand.New(rand.NewSource(int64(w) + 1))
						for i := range 4000 {
							if w == 0 && i%5 == 0 {
								clk.Advance(time.Duration(rng.Intn(3000)) * time.Microsecond)
							}
							n := 1 + rng.Int63n(4)
							if mode == "reserve" {
								r := e.Reserve(fmt.Sprint("k", rng.Intn(2)), n)
								if r.Cancel() {
									cancels.Add(1)
								}
								continue
							}
							if mode == "emulated" {
								now := time.Unix(0, clk.UnixNano())
								r0 := e.ReserveAt("k0", n, now)
								if !r0.Decision().Allowed {
									continue
								}
								r1 := e.ReserveAt("k1", 1+rng.Int63n(3), now)
								if !r1.Decision().Allowed {
									if r0.Cancel() {
										cancels.Add(1)
									} else {
										failedCancels.Add(1)
									}
								}
								continue
							}
							idx, _ := engine.AllowAll(time.Unix(0, clk.UnixNano()), engine.Request{Engine: e, Key: "k0", N: n}, engine.Request{Engine: e, Key: "k1", N: 1 + rng.Int63n(3)})
							if idx == 1 {
								allowAllCancels.Add(1)
							}
						}
					})
				}
				wg.Wait()
				r := e.Audit()
				t.Logf("cancels %d allowall-cancels %d failed %d: %+v", cancels.Load(), allowAllCancels.Load(), failedCancels.Load(), r)
				// AllowAll's own cancels can give nothing back when another
				// request moved the key a window on meanwhile (documented), so
				// its count is an upper bound.
				if got, want := r.Unadmits, cancels.Load()+allowAllCancels.Load(); got != want && (mode != "allowall" || got > want) {
					t.Errorf("Unadmits = %d, want %d", got, want)
				}
			})
		}
	}
}
