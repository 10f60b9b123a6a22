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

// Contradicts, if it fails: design.md §11 "Eviction" (a sweep never removes a
// bucket that still owes units; a new ring starts at or after the floor,
// full, which is exactly the old state) and the window bound, with sweeps,
// moves, reservations and cancels racing writers on the engine's clock.
func TestAdvTokenBucketSweepRaceBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []advCfg{{7, time.Millisecond, 3}, {engine.MaxLimit, 1 << 59, 2}, {3, 10, 1}, {engine.MaxLimit, 1, 5}} {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			clk := engine.NewManualClock(time.Unix(0, t0))
			e, err := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: c.L, Window: c.W, Burst: c.B, Clock: clk, SweepInterval: time.Hour, Shards: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			T := int64(c.W) / c.L
			if T < 1 {
				T = 1
			}
			var units atomic.Int64
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // the clock, in jumps that make keys full now and then
				defer wg.Done()
				rng := rand.New(rand.NewSource(1))
				for i := 0; i < 20000; i++ {
					step := rng.Int63n(2 * T)
					if rng.Intn(50) == 0 {
						step = rng.Int63n(10 * T * c.burst())
					}
					clk.Advance(time.Duration(step))
				}
				stop.Store(true)
			}()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					e.Sweep()
				}
			}()
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(g) + 10))
					for !stop.Load() {
						now := time.Unix(0, clk.UnixNano())
						key := []string{"a", "b"}[rng.Intn(2)]
						if rng.Intn(4) == 0 {
							r := e.ReserveAt(key, 1, now)
							if r.Decision().Allowed {
								if key == "a" {
									units.Add(1)
								}
								if rng.Intn(2) == 0 && r.Cancel() && key == "a" {
									units.Add(-1)
								}
							}
							continue
						}
						if e.AllowAt(key, 1, now).Allowed && key == "a" {
							units.Add(1)
						}
					}
				}(g)
			}
			wg.Wait()
			span := clk.UnixNano() - t0
			max := c.burst() + advFloor(new(big.Rat).Mul(big.NewRat(span, 1), big.NewRat(c.L, int64(c.W))))
			if units.Load() > max {
				t.Fatalf("key a admitted %d units in %d ns, bound %d", units.Load(), span, max)
			}
		})
	}
}

// Contradicts, if it fails: design.md §11 "The window bound": "there are no
// false admissions, and no false denials either", and "Eviction" (a
// reclaimed key starts full, exactly the old state). Phases at frozen
// instants: racing writers drain the bucket; each phase admits exactly what
// rational GCRA admits at that instant, with sweeps and moves in between.
func TestAdvTokenBucketPhasesExact(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []advCfg{{7, time.Millisecond, 3}, {engine.MaxLimit, 1 << 59, 2}, {3, 10, 5}, {engine.MaxLimit, 1, 5}, {10, time.Second, 5}, {999_999, 24 * time.Hour, 1}} {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			clk := engine.NewManualClock(time.Unix(0, t0))
			e, err := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: c.L, Window: c.W, Burst: c.B, Clock: clk, SweepInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			m := &advModel{L: c.L, W: int64(c.W), B: c.burst()}
			tauNs := advCeil(m.tau())
			rng := rand.New(rand.NewSource(3))
			now := t0
			for phase := 0; phase < 400; phase++ {
				switch rng.Intn(4) {
				case 0:
					now += rng.Int63n(tauNs + 1)
				case 1:
					now += tauNs // exactly full again (at least)
				case 2:
					now += rng.Int63n(3*tauNs + 1)
				case 3:
					now += advCeil(new(big.Rat).Quo(m.tau(), big.NewRat(2, 1)))
				}
				clk.Set(time.Unix(0, now))
				if rng.Intn(2) == 0 {
					e.Sweep()
				}
				want := int64(0)
				for {
					ok, _, _ := m.decide(now, 1, true)
					if !ok {
						break
					}
					want++
				}
				var got atomic.Int64
				var wg sync.WaitGroup
				for g := 0; g < 4; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := int64(0); i <= c.burst(); i++ {
							if e.AllowAt("k", 1, time.Unix(0, now)).Allowed {
								got.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				if got.Load() != want {
					t.Fatalf("phase %d at +%d ns: admitted %d, rational GCRA admits %d", phase, now-t0, got.Load(), want)
				}
			}
		})
	}
}
