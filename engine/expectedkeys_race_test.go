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
					stop := make(chan struct{})
					swept := make(chan struct{})
					go func() { // reclaims the last phase's keys while they are revived
						defer close(swept)
						for {
							select {
							case <-stop:
								return
							default:
								e.Sweep()
							}
						}
					}()
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
					close(stop)
					<-swept
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
