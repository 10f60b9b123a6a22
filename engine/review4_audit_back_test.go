package engine_test

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// One key, requests far behind the key's newest time (up to 3 windows) mixed
// with forward steps, reservations and cancels: a single timeline, so no
// lagging-key exemption applies. Strict/log: no false admits; log: no false
// denies; nothing unjudged.
func TestReview4AuditSingleKeyFarBack(t *testing.T) {
	for _, alg := range allAlgorithms {
		for seed := int64(1); seed <= scaled[int64](25, 200); seed++ {
			t.Run(fmt.Sprint(alg, "/", seed), func(t *testing.T) {
				rng := rand.New(rand.NewSource(seed))
				clk := engine.NewManualClock(advT0)
				win := time.Second
				e := advNew(t, engine.Config{Limit: 5, Window: win, SubWindows: 4, Algorithm: alg, Audit: 1, DisableEviction: true, Clock: clk})
				newest := advT0
				var held []*engine.Reservation
				for i := 0; i < 300; i++ {
					var now time.Time
					if rng.Intn(3) == 0 {
						now = newest.Add(-time.Duration(rng.Int63n(int64(3 * win))))
					} else {
						now = newest.Add(time.Duration(rng.Int63n(int64(win / 3))))
					}
					if now.After(newest) {
						newest = now
					}
					clk.Set(newest)
					n := 1 + rng.Int63n(3)
					switch rng.Intn(4) {
					case 0, 1:
						e.AllowAt("k", n, now)
					case 2:
						r := new(engine.Reservation)
						*r = e.ReserveAt("k", n, now)
						held = append(held, r)
					case 3:
						if len(held) > 0 {
							j := rng.Intn(len(held))
							held[j].Cancel()
							held = append(held[:j], held[j+1:]...)
						}
					}
					if rng.Intn(25) == 0 {
						e.Audit()
					}
				}
				r := e.Audit()
				advConsistent(t, r)
				if r.Unjudged != 0 {
					t.Errorf("unjudged on one timeline: %+v", r)
				}
				if (alg == engine.SlidingWindowStrict || alg == engine.SlidingLog) && (r.FalseAdmits != 0 || r.WorstWindow > 1) {
					t.Errorf("%+v", r)
				}
				if alg == engine.SlidingLog && r.FalseDenies != 0 {
					t.Errorf("%+v", r)
				}
			})
		}
	}
}
