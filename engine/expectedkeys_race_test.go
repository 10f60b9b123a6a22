package engine_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// expectedKeysAlgs are the algorithms Config.ExpectedKeys must leave
// exact.
var expectedKeysAlgs = []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog, engine.TokenBucket}

// expectedKeysMix returns keys of every length the slot cares about (0,
// 1, 7, 8, 15, 16, 127, 128 and long), binary bytes among them, per
// distinct keys of each length.
func expectedKeysMix(per int) []string {
	var keys []string
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	add("")
	for _, n := range []int{1, 7, 8, 15, 16, 127, 128, 1000} {
		for j := range per {
			b := []byte(strings.Repeat("k", n))
			b[n-1] = byte(j)        // binary last byte: 0x00 …
			b[0] = byte(0xff - j%7) // and a binary first one
			add(string(b))
		}
	}
	return keys
}

// sweepUntilStopped runs e.Sweep in a loop on a goroutine of its own until
// the returned func is called, which returns once the loop has ended.
func sweepUntilStopped(e *engine.Engine) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			default:
				e.Sweep()
			}
		}
	}()
	return func() { close(done); <-ended }
}

// With a tiny ExpectedKeys, deciders, reservations (cancelled or kept) and
// a sweeper race on keys of every length while the table fills its first
// slab, grows past it through new generations and, phase after phase,
// has every key reclaimed and revived: at each phase's one instant every
// key admits exactly its limit, net of what Cancel reported it gave back,
// the table holds each key once, and a final idle sweep reclaims them
// all.
func TestExpectedKeysConcurrentExact(t *testing.T) {
	const (
		limit   = 5
		workers = 4
		tries   = 3 // per key and worker: 12 > limit
		phases  = 6
	)
	keys := expectedKeysMix(24)
	for _, alg := range expectedKeysAlgs {
		for _, expect := range []int64{1, 16, int64(len(keys))} {
			t.Run(alg.String()+"/expected="+strconv.FormatInt(expect, 10), func(t *testing.T) {
				clk := engine.NewManualClock(t0)
				e := newEngine(t, engine.Config{Algorithm: alg, Limit: limit, Window: time.Second, Shards: 4, Clock: clk, SweepInterval: time.Hour, ExpectedKeys: expect})
				now := t0
				for p := range phases {
					now = t0.Add(time.Duration(p) * 5 * time.Second)
					clk.Set(now)
					net := make([]atomic.Int64, len(keys))
					var wg sync.WaitGroup
					stopSweeps := sweepUntilStopped(e) // reclaims the last phase's keys while they are revived
					for w := range workers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							rng := rand.New(rand.NewPCG(uint64(p), uint64(w)))
							for _, i := range rng.Perm(len(keys)) {
								for range tries {
									k := keys[i]
									if rng.IntN(3) == 0 {
										r := e.ReserveAt(k, 1, now)
										if r.Decision().Allowed {
											net[i].Add(1)
										}
										if rng.IntN(2) == 0 && r.Cancel() {
											net[i].Add(-1)
										}
										continue
									}
									if d := e.AllowAt(k, 1, now); d.Allowed {
										net[i].Add(1)
									} else if d.Reason() != engine.ReasonLimited {
										t.Errorf("phase %d: AllowAt(%q) denied with %v", p, k, d.Reason())
									}
								}
							}
						}()
					}
					wg.Wait()
					stopSweeps()
					for i, k := range keys {
						got := net[i].Load()
						for e.AllowAt(k, 1, now).Allowed {
							got++
						}
						if got != limit {
							t.Fatalf("phase %d: key %q (len %d) admitted %d net at one instant, want exactly %d", p, k[:min(len(k), 9)], len(k), got, limit)
						}
					}
					if n := e.Len(); n != int64(len(keys)) {
						t.Fatalf("phase %d: Len = %d, want %d", p, n, len(keys))
					}
				}
				clk.Set(now.Add(5 * time.Second))
				if n := e.Sweep(); n != len(keys) {
					t.Fatalf("final idle Sweep reclaimed %d keys, want %d", n, len(keys))
				}
				if n := e.Len(); n != 0 {
					t.Fatalf("Len after the final sweep = %d, want 0", n)
				}
			})
		}
	}
}

// With ExpectedKeys, limit raises and Resets race with deciders and a
// sweeper that reclaims last phase's keys, phase after phase: a key whose
// limit was raised from 5 to 8 at the phase's instant (SetLimitAt is
// activity, so no sweep there drops the raise) admits exactly 8, a key
// never touched by either exactly 5, and a key Reset meanwhile at most 5
// per successful Reset plus 5, with at most 5 left after.
func TestExpectedKeysConcurrentLimitsAndResets(t *testing.T) {
	const (
		limit, raised = 5, 8
		workers       = 3
		tries         = 4
		phases        = 5
	)
	keys := expectedKeysMix(18)
	for _, alg := range expectedKeysAlgs[:4] { // TokenBucket has no per-key limits
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Algorithm: alg, Limit: limit, Window: time.Second, Shards: 2, Clock: clk, SweepInterval: time.Hour, ExpectedKeys: 8, PerKeyLimits: true})
			for p := range phases {
				now := t0.Add(time.Duration(p) * 5 * time.Second)
				clk.Set(now)
				admits := make([]atomic.Int64, len(keys))
				resets := make([]atomic.Int64, len(keys))
				var wg sync.WaitGroup
				stopSweeps := sweepUntilStopped(e)
				wg.Add(2)
				go func() { // raises group 1's limits
					defer wg.Done()
					for i := 1; i < len(keys); i += 3 {
						if err := e.SetLimitAt(keys[i], raised, now); err != nil {
							t.Errorf("phase %d: SetLimitAt(%q): %v", p, keys[i], err)
						}
					}
				}()
				go func() { // resets group 2's keys, twice over
					defer wg.Done()
					for range 2 {
						for i := 2; i < len(keys); i += 3 {
							if e.Reset(keys[i]) {
								resets[i].Add(1)
							}
						}
					}
				}()
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(p), uint64(w)+100))
						for _, i := range rng.Perm(len(keys)) {
							for range tries {
								if e.AllowAt(keys[i], 1, now).Allowed {
									admits[i].Add(1)
								}
							}
						}
					}()
				}
				wg.Wait()
				stopSweeps()
				for i, k := range keys {
					drained := int64(0)
					for e.AllowAt(k, 1, now).Allowed {
						drained++
					}
					got, short := admits[i].Load()+drained, k[:min(len(k), 9)]
					switch i % 3 {
					case 0:
						if got != limit {
							t.Fatalf("phase %d: key %q (len %d) admitted %d at one instant, want exactly %d", p, short, len(k), got, limit)
						}
					case 1:
						if got != raised {
							t.Fatalf("phase %d: key %q (len %d) raised to %d admitted %d at one instant, want exactly %d", p, short, len(k), raised, got, raised)
						}
					case 2:
						if r := resets[i].Load(); drained > limit || admits[i].Load() > limit*(1+r) {
							t.Fatalf("phase %d: key %q (len %d) admitted %d with %d Resets, then %d more; want at most %d per count", p, short, len(k), admits[i].Load(), r, drained, limit)
						}
					}
				}
				if n := e.Len(); n != int64(len(keys)) {
					t.Fatalf("phase %d: Len = %d, want %d", p, n, len(keys))
				}
			}
		})
	}
}

// MaxKeys equal to ExpectedKeys: creators of four times as many keys race
// past it, and sweeps empty the table between rounds that revive the
// same keys: each round holds exactly MaxKeys keys, every refusal is
// ReasonKeysFull, and each sweep reclaims exactly the keys held.
func TestExpectedKeysMaxKeysRace(t *testing.T) {
	const max = 40
	keys := expectedKeysMix(20) // 161 keys
	for _, alg := range expectedKeysAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Algorithm: alg, Limit: 1000, Window: time.Second, Shards: 4, Clock: clk, SweepInterval: time.Hour, MaxKeys: max, ExpectedKeys: max})
			for round := range 12 {
				now := t0.Add(time.Duration(round) * 5 * time.Second)
				clk.Set(now)
				held := make([]atomic.Bool, len(keys))
				var wg sync.WaitGroup
				for w := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
						for _, i := range rng.Perm(len(keys)) {
							d := e.AllowAt(keys[i], 1, now)
							switch {
							case d.Allowed:
								held[i].Store(true)
							case d.Reason() != engine.ReasonKeysFull:
								t.Errorf("round %d: AllowAt(%q) denied with %v, want ReasonKeysFull", round, keys[i], d.Reason())
							}
						}
					}()
				}
				wg.Wait()
				n := 0
				for i := range held {
					if held[i].Load() {
						n++
					}
				}
				if n != max || e.Len() != max {
					t.Fatalf("round %d: %d keys admitted, Len %d; want exactly MaxKeys = %d", round, n, e.Len(), max)
				}
				clk.Set(now.Add(3 * time.Second))
				if got := e.Sweep(); got != max {
					t.Fatalf("round %d: idle Sweep reclaimed %d keys, want %d", round, got, max)
				}
			}
		})
	}
}

// With ExpectedKeys, reservations made at t0 are cancelled while other
// callers reach the same keys 2^21 and more sub-windows later (which
// retires each key's state and builds a new one, in a presized slab that
// fills and renews) and a sweeper runs: no Cancel gives anything to the
// new state, so at the far instant each key admits exactly its limit.
func TestExpectedKeysCancelAcrossFarJump(t *testing.T) {
	const limit = 4
	keys := expectedKeysMix(6)
	for _, alg := range expectedKeysAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Algorithm: alg, Limit: limit, Window: time.Second, Shards: 2, Clock: clk, SweepInterval: 1 << 62, ExpectedKeys: 4})
			var held []engine.Reservation
			for _, k := range keys {
				for range limit {
					r := e.ReserveAt(k, 1, t0)
					if !r.Decision().Allowed {
						t.Fatalf("ReserveAt(%q) at t0 denied: %+v", k, r.Decision())
					}
					held = append(held, r)
				}
			}
			far := t0.Add(time.Second / 10 * (1<<21 + 5))
			clk.Set(far)
			admits := make([]atomic.Int64, len(keys))
			var wg sync.WaitGroup
			wg.Add(3)
			go func() {
				defer wg.Done()
				for i := range held {
					held[i].Cancel()
				}
			}()
			go func() {
				defer wg.Done()
				for range 50 {
					e.Sweep()
				}
			}()
			go func() {
				defer wg.Done()
				for range 2 {
					for i, k := range keys {
						if e.AllowAt(k, 1, far).Allowed {
							admits[i].Add(1)
						}
					}
				}
			}()
			wg.Wait()
			for i, k := range keys {
				got := admits[i].Load()
				for e.AllowAt(k, 1, far).Allowed {
					got++
				}
				if got != limit {
					t.Fatalf("key %q (len %d) admitted %d at the far instant, want exactly %d", k[:min(len(k), 9)], len(k), got, limit)
				}
			}
		})
	}
}
