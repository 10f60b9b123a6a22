package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A key's state replaced by Reset, or reclaimed idle and created again,
// is retired for good: a Reservation of the old state gives nothing to
// the new count (Cancel reports false), and the new state starts from
// zero, for keys of every length around the home slab's head and slot
// sizes, and for every algorithm. The key's place in the slab (its old,
// retired ring in one slot, the new one in the other or on the heap)
// must never bring the old count back.
func TestRetiredStateStaysRetired(t *testing.T) {
	algs := []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog, engine.TokenBucket}
	lengths := []int{0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 71, 72, 200}
	for _, alg := range algs {
		t.Run(alg.String(), func(t *testing.T) {
			const window, limit = 100 * time.Millisecond, 3
			t0 := time.Unix(1_700_000_000, 0)
			clk := engine.NewManualClock(t0)
			e, err := engine.New(engine.Config{Limit: limit, Window: window, Algorithm: alg, Clock: clk, SweepInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			now := t0
			for _, n := range lengths {
				key := strings.Repeat("r", n)
				for round := range 4 { // 4 rounds: both slots hold retired rings by the end
					old := e.ReserveAt(key, limit, now)
					if !old.Decision().Allowed {
						t.Fatalf("len %d round %d: a fresh key refused its limit: %+v", n, round, old.Decision())
					}
					if round%2 == 0 {
						if !e.Reset(key) {
							t.Fatalf("len %d round %d: Reset found no state", n, round)
						}
					} else {
						now = now.Add(4 * window) // idle past reclamation
						clk.Set(now)
						if got := e.Sweep(); got < 1 {
							t.Fatalf("len %d round %d: Sweep reclaimed nothing", n, round)
						}
					}
					if d := e.AllowAt(key, 1, now); !d.Allowed || d.Remaining != limit-1 {
						t.Fatalf("len %d round %d: the new state does not start from zero: %+v", n, round, d)
					}
					if old.Cancel() {
						t.Fatalf("len %d round %d: Cancel of the retired state's reservation returned units", n, round)
					}
					if d := e.AllowAt(key, 0, now); d.Remaining != limit-1 {
						t.Fatalf("len %d round %d: the old reservation's Cancel changed the new count: %+v", n, round, d)
					}
					now = now.Add(4 * window)
					clk.Set(now)
				}
			}
		})
	}
}
