package engine_test

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A key refused at MaxKeys leaves nothing behind, in the home slab or
// elsewhere: asked again it is refused again, and Len stays at the cap.
func TestRefusedKeyLeavesNoState(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog, engine.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			clk := engine.NewManualClock(now)
			e, err := engine.New(engine.Config{Limit: 2, Window: time.Second, Algorithm: alg, MaxKeys: 5, Clock: clk, SweepInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for i := range 5 {
				if d := e.AllowAt("key"+strconv.Itoa(i), 1, now); !d.Allowed {
					t.Fatalf("key %d refused below the cap: %+v", i, d)
				}
			}
			for i := range 4 {
				for _, k := range []string{"x", "y", "", "longer-than-the-slab-head"} {
					if d := e.AllowAt(k, 1, now); d.Allowed || d.Reason() != engine.ReasonKeysFull {
						t.Fatalf("attempt %d: new key %q at the cap: %+v (%v), want keys-full", i, k, d, d.Reason())
					}
				}
				if e.Reset("x") {
					t.Fatal("Reset found state for a key refused at the cap")
				}
				if got := e.Len(); got != 5 {
					t.Fatalf("Len %d at the cap of 5", got)
				}
			}
			now = now.Add(time.Minute)
			clk.Set(now)
			if got := e.Sweep(); got != 5 {
				t.Fatalf("Sweep reclaimed %d, want 5", got)
			}
			if d := e.AllowAt("x", 2, now); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("x after room was made: %+v, want its whole limit", d)
			}
		})
	}
}

// Writers race to create more keys than MaxKeys while sweepers reclaim the
// previous round's keys, which are idle. With Limit 1 and one instant per
// round, a key admits at most once in a round, and at most MaxKeys distinct
// keys admit in a round (each stays live, not idle, until the round ends):
// a ring created for a refused key and left reachable (in the slab) would
// admit a key twice or one key too many.
func TestMaxKeysRaceAdmitsNoPhantomKey(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			const maxKeys, pool, workers, rounds = 48, 160, 4, 6
			t0 := time.Unix(1_700_000_000, 0)
			clk := engine.NewManualClock(t0)
			e, err := engine.New(engine.Config{Limit: 1, Window: 100 * time.Millisecond, Algorithm: alg, MaxKeys: maxKeys,
				Clock: clk, Shards: 1, SweepInterval: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for round := range rounds {
				at := t0.Add(time.Duration(round) * time.Second)
				clk.Set(at)
				var admitted [pool]atomic.Int64
				var stop atomic.Bool
				var sw sync.WaitGroup
				sw.Add(1)
				go func() {
					defer sw.Done()
					for !stop.Load() {
						e.Sweep()
					}
				}()
				var wg sync.WaitGroup
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for j := range 3 * pool {
							i := (j*7 + w*13 + round) % pool
							if e.AllowAt(fmt.Sprintf("p%d-%d", round%2, i), 1, at).Allowed {
								admitted[i].Add(1)
							}
						}
					}()
				}
				wg.Wait()
				stop.Store(true)
				sw.Wait()
				distinct := 0
				for i := range admitted {
					switch a := admitted[i].Load(); {
					case a > 1:
						t.Fatalf("round %d: key %d admitted %d units with Limit 1", round, i, a)
					case a == 1:
						distinct++
					}
				}
				if distinct > maxKeys {
					t.Fatalf("round %d: %d distinct keys admitted with MaxKeys %d", round, distinct, maxKeys)
				}
				if got := e.Len(); got > maxKeys {
					t.Fatalf("round %d: Len %d above MaxKeys %d", round, got, maxKeys)
				}
			}
		})
	}
}
