package engine_test

import (
	"math/big"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Contradicts, if it fails: the Algorithm doc "In any interval of length D at
// most Burst + ⌊D·Limit/Window⌋ units are admitted", under racing writers on
// an advancing clock (through moves for MaxLimit per 2^59 ns).
func TestAdvTokenBucketAdvancingClockBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range advCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			e := newAdv(t, c, engine.NewManualClock(time.Unix(0, t0)))
			var clock atomic.Int64
			clock.Store(t0)
			T := int64(c.W) / c.L
			if T < 1 {
				T = 1
			}
			var units atomic.Int64
			var maxNow atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 6; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(g)))
					for i := 0; i < 3000; i++ {
						var now int64
						if g == 0 {
							now = clock.Add(rng.Int63n(2*T) + 0)
						} else {
							now = clock.Load()
						}
						for {
							m := maxNow.Load()
							if now <= m || maxNow.CompareAndSwap(m, now) {
								break
							}
						}
						n := rng.Int63n(c.burst()) + 1
						if n > 3 {
							n = rng.Int63n(3) + 1
						}
						if e.AllowAt("k", n, time.Unix(0, now)).Allowed {
							units.Add(n)
						}
					}
				}(g)
			}
			wg.Wait()
			bound := new(big.Rat).Mul(big.NewRat(maxNow.Load()-t0, 1), big.NewRat(c.L, int64(c.W)))
			max := c.burst() + advFloor(bound)
			if units.Load() > max {
				t.Fatalf("admitted %d units over %d ns, bound %d", units.Load(), maxNow.Load()-t0, max)
			}
		})
	}
}

// Contradicts, if it fails: Cancel's TokenBucket doc and design.md §11: under
// racing Reserve/Cancel at one instant the bucket's state is exactly Burst
// minus the units still held (admitted and not given back).
func TestAdvTokenBucketReserveCancelRace(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []advCfg{{7, time.Millisecond, 5}, {3, 10, 4}, {engine.MaxLimit, 1 << 59, 2}, {10, time.Second, 50}} {
		e := newAdv(t, c, engine.NewManualClock(at))
		var held atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(g)))
				for i := 0; i < 2000; i++ {
					n := rng.Int63n(2) + 1
					r := e.ReserveAt("k", n, at)
					if !r.Decision().Allowed {
						continue
					}
					held.Add(n)
					if rng.Intn(3) != 0 && r.Cancel() {
						held.Add(-n)
					}
				}
			}(g)
		}
		wg.Wait()
		if h := held.Load(); h > c.burst() {
			t.Fatalf("%v: %d units held at one instant, Burst %d", c, h, c.burst())
		}
		d := e.AllowAt("k", 0, at)
		if d.Remaining != c.burst()-held.Load() {
			t.Fatalf("%v: Remaining %d, want Burst − held = %d", c, d.Remaining, c.burst()-held.Load())
		}
	}
}
