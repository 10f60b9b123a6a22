package engine_test

import (
	"math/rand"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// One sequential caller, real time through CoarseClock, Reserve/Cancel,
// AllowN, AllowAll refusals, SetLimit: Strict/log never show a false admit.
func TestReview6CoarseSequential(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := advNew(t, engine.Config{Limit: 4, Window: 20 * time.Millisecond, SubWindows: 4, Algorithm: alg, Audit: 1, CoarseClock: 100 * time.Microsecond, PerKeyLimits: true})
		rng := rand.New(rand.NewSource(1))
		var held []*engine.Reservation
		var cancels int64
		stop := time.Now().Add(time.Second)
		for time.Now().Before(stop) {
			switch rng.Intn(7) {
			case 0:
				e.AllowN("a", 1+rng.Int63n(3))
			case 1, 2:
				r := new(engine.Reservation)
				*r = e.Reserve("a", 1+rng.Int63n(2))
				if r.Decision().Allowed {
					held = append(held, r)
				}
			case 3, 4:
				if len(held) > 0 {
					j := rng.Intn(len(held))
					if held[j].Cancel() {
						cancels++
					}
					held = append(held[:j], held[j+1:]...)
				}
			case 5:
				engine.AllowAll(time.Now(), engine.Request{Engine: e, Key: "a", N: 1 + rng.Int63n(2)}, engine.Request{Engine: e, Key: "a", N: 1 + rng.Int63n(4)})
			case 6:
				if rng.Intn(20) == 0 {
					if r := e.Audit(); r.Entries > 4 {
						t.Errorf("%v: Entries %d > L = 4 for the only key: %+v", alg, r.Entries, r)
						return
					}
				}
			}
			if rng.Intn(200) == 0 {
				time.Sleep(time.Duration(rng.Intn(3000)) * time.Microsecond)
			}
		}
		rep := e.Audit()
		t.Logf("%v %+v", alg, rep)
		advConsistent(t, rep)
		if rep.FalseAdmits != 0 {
			t.Errorf("%v: FalseAdmits %d (Dropped %d)", alg, rep.FalseAdmits, rep.Dropped)
		}
	}
}
