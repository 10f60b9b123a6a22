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

// The token bucket under racing goroutines: a frozen clock admits exactly
// Burst, an advancing one never more than the bound, with sweeps, moves,
// reservations and cancels racing.

// Guards "Capacity is B, not B + 1" and the Done-when
// "a frozen clock admits exactly Burst", under racing goroutines.
func TestTokenBucketFrozenClockExactlyBurst(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range ratCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			b := c.burst()
			if b > 5000 {
				b = -1
			}
			e := newRatBucket(t, c, engine.NewManualClock(at))
			var got atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 800; i++ {
						if e.AllowAt("k", 1, at).Allowed {
							got.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			want := c.burst()
			if want > 6400 {
				want = 6400
			}
			if got.Load() != want {
				t.Fatalf("frozen clock admitted %d, want %d", got.Load(), want)
			}
		})
	}
}

// Guards the Algorithm doc "In any interval of length D at
// most Burst + ⌊D·Limit/Window⌋ units are admitted", under racing writers on
// an advancing clock (through moves for MaxLimit per 2^59 ns).
func TestTokenBucketAdvancingClockBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range ratCfgs {
		c := c
		t.Run(c.String(), func(t *testing.T) {
			e := newRatBucket(t, c, engine.NewManualClock(time.Unix(0, t0)))
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
			max := c.burst() + ratFloor(bound)
			if units.Load() > max {
				t.Fatalf("admitted %d units over %d ns, bound %d", units.Load(), maxNow.Load()-t0, max)
			}
		})
	}
}

// Guards Cancel's TokenBucket doc and design.md §11: under
// racing Reserve/Cancel at one instant the bucket's state is exactly Burst
// minus the units still held (admitted and not given back).
func TestTokenBucketReserveCancelRace(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []ratCfg{{7, time.Millisecond, 5}, {3, 10, 4}, {engine.MaxLimit, 1 << 59, 2}, {10, time.Second, 50}} {
		e := newRatBucket(t, c, engine.NewManualClock(at))
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

// Guards design.md §11 "Eviction" (a sweep never removes a
// bucket that still owes units; a new ring starts at or after the floor,
// full, which is exactly the old state) and the window bound, with sweeps,
// moves, reservations and cancels racing writers on the engine's clock.
func TestTokenBucketSweepRaceBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []ratCfg{{7, time.Millisecond, 3}, {engine.MaxLimit, 1 << 59, 2}, {3, 10, 1}, {engine.MaxLimit, 1, 5}} {
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
			max := c.burst() + ratFloor(new(big.Rat).Mul(big.NewRat(span, 1), big.NewRat(c.L, int64(c.W))))
			if units.Load() > max {
				t.Fatalf("key a admitted %d units in %d ns, bound %d", units.Load(), span, max)
			}
		})
	}
}

// Guards Reservation.Cancel doc ("Cancel is idempotent
// across copies, also when called concurrently: one call returns the units").
func TestTokenBucketCancelCopiesOnce(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 200; i++ {
		e := newRatBucket(t, ratCfg{7, time.Millisecond, 3}, engine.NewManualClock(at))
		r := e.ReserveAt("k", 2, at)
		var wins atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			cp := r
			wg.Add(1)
			go func() {
				defer wg.Done()
				if cp.Cancel() {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d copies cancelled", wins.Load())
		}
		if d := e.AllowAt("k", 0, at); d.Remaining != 3 {
			t.Fatalf("after one cancel: Remaining %d", d.Remaining)
		}
	}
}
