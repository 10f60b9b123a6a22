package engine_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Reservations on keys that were reclaimed; then new keys at the same
// instants (AllowAt's own timeline). Cancel of the old reservations must
// not touch the new keys' units (state memory reused for another key).
func TestReview4CancelAfterReclaimNoCrossKey(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		clk := engine.NewManualClock(t13)
		e := new13(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour})
		const K = 2000
		rs := make([]engine.Reservation, K)
		for i := range rs {
			rs[i] = e.ReserveAt(fmt.Sprintf("a%04d", i), 3, t13)
		}
		clk.Set(t13.Add(time.Hour))
		if n := e.Sweep(); n != K {
			t.Fatalf("swept %d", n)
		}
		runtime.GC()
		for i := 0; i < K; i++ {
			if !e.AllowAt(fmt.Sprintf("b%04d", i), 5, t13).Allowed {
				t.Fatal("b denied")
			}
			if !e.AllowAt(fmt.Sprintf("a%04d", i), 5, t13).Allowed {
				t.Fatal("a denied")
			}
		}
		for i := range rs {
			if rs[i].Cancel() {
				t.Errorf("%v: Cancel of a reclaimed key's reservation returned true", alg)
				break
			}
		}
		for i := 0; i < K; i++ {
			for _, k := range []string{"a", "b"} {
				if rem := e.AllowAt(fmt.Sprintf("%s%04d", k, i), 0, t13).Remaining; rem != 0 {
					t.Fatalf("%v: key %s%04d remaining %d after old cancels", alg, k, i, rem)
				}
			}
		}
	}
}
