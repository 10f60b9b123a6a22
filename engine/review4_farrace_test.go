package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Reserves at e racing with a far writer (2^21 sub-windows on) that
// retires and replaces the ring. Afterwards every reservation is
// cancelled; the fresh ring must hold exactly the units of the
// reservations recorded on it whose Cancel returned false, and none of a
// reservation whose Cancel returned true.
func TestReview4ReserveRacingFarWriter(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		for round := 0; round < 40; round++ {
			W := 4 * time.Millisecond
			N := 4
			w := W / time.Duration(N)
			if alg == engine.FixedWindow {
				w = W
			}
			const L = 1 << 30
			e := new13(t, engine.Config{Limit: L, Window: W, SubWindows: N, Algorithm: alg, DisableEviction: true})
			far := t13.Add(w * (1 << 21))
			e.AllowAt("k", 1, t13)
			const G = 4
			res := make([][]engine.Reservation, G)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := 0; g < G; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					<-start
					for i := 0; i < 300; i++ {
						res[g] = append(res[g], e.ReserveAt("k", 1, t13))
					}
				}(g)
			}
			var farRes engine.Reservation
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 50; i++ {
					time.Sleep(0)
				}
				farRes = e.ReserveAt("k", 1, far)
			}()
			close(start)
			wg.Wait()
			var kept int64
			farE := far.Truncate(w)
			if alg == engine.FixedWindow {
				farE = time.Unix(0, far.UnixNano()/int64(w)*int64(w))
			}
			for g := range res {
				for i := range res[g] {
					r := &res[g][i]
					if !r.Decision().Allowed {
						t.Fatal("denied")
					}
					at := r.At()
					ok := r.Cancel()
					if !at.Before(farE) && !ok {
						kept++
					}
					if at.Before(farE) && ok {
						t.Fatalf("%v: Cancel true on a reservation at %v on the retired ring", alg, at)
					}
				}
			}
			if !farRes.Cancel() {
				kept++
			}
			rem := e.AllowAt("k", 0, far).Remaining
			if L-rem != kept {
				t.Fatalf("%v round %d: fresh ring holds %d units, reservations that kept units on it: %d", alg, round, L-rem, kept)
			}
		}
	}
}
