package redisstore

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Many goroutines on several limiters (each its own client, as replicas)
// reserve one unit, hold it, and cancel it: never more than Limit are held
// at once, and once every unit is back Redis holds none (no cancel lost,
// none applied twice). The window (1 minute) outlasts the run, so a unit
// counts until it is cancelled.
func TestInFlightNeverPastLimit(t *testing.T) {
	s := redistest.Start(t)
	const limit = 8
	cfg := engine.Config{Limit: limit, Window: time.Minute, SubWindows: 12, Algorithm: engine.SlidingWindowStrict}
	var inFlight, peak, admitted atomic.Int64
	errc := make(chan error, 64)
	var wg sync.WaitGroup
	var ls []*Limiter
	for range 3 {
		l := mustNew(t, client(t, s), cfg)
		ls = append(ls, l)
		for g := range 6 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for range 150 {
					r, err := l.Reserve(ctx, "tenant", 1)
					if err != nil {
						errc <- err
						return
					}
					if !r.Decision().Allowed {
						continue
					}
					admitted.Add(1)
					now := inFlight.Add(1)
					if now > limit {
						errc <- fmt.Errorf("%d reservations held at once, limit %d", now, limit)
					}
					for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
					}
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
					inFlight.Add(-1) // before the cancel: Redis counts the unit at least as long as this does
					cp := r          // a copy cancels as well
					if ok, err := cp.Cancel(ctx); !ok || err != nil {
						errc <- fmt.Errorf("Cancel: %v %v", ok, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if got := storedUnits(t, ls[0].client, ls[0], "tenant"); got != 0 {
		t.Fatalf("Redis holds %d units after every cancel, want 0", got)
	}
	t.Logf("admitted %d, peak in flight %d", admitted.Load(), peak.Load())
	if admitted.Load() < 100 || peak.Load() < 2 {
		t.Fatalf("the run did not contend: admitted %d, peak %d", admitted.Load(), peak.Load())
	}
}

// Concurrent reserves settled to random actual costs (fewer, equal, more:
// debts), with charges beside them: Redis ends holding exactly the units
// settled and charged, and Cancel and Settle race on copies of one
// reservation with exactly one winner.
func TestSettleConcurrentExact(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Limit: 100_000, Window: time.Minute, SubWindows: 6, Algorithm: engine.SlidingWindow} // the limit is not the point: every reservation of 3 fits
	l := mustNew(t, client(t, s), cfg)
	var want, winners atomic.Int64
	errc := make(chan error, 64)
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range 60 {
				if rng.IntN(5) == 0 {
					n := int64(rng.IntN(3))
					if _, err := l.ChargeN(ctx, "k", n); err != nil {
						errc <- err
						return
					}
					want.Add(n)
					continue
				}
				r, err := l.Reserve(ctx, "k", 3)
				if err != nil {
					errc <- err
					return
				}
				if r.Units() == 0 {
					continue
				}
				actual := int64(rng.IntN(7))
				// Settle and Cancel race on two copies: one wins.
				var won atomic.Int64
				var inner sync.WaitGroup
				cp := r
				inner.Go(func() {
					if _, err := cp.Settle(ctx, actual); err == nil {
						won.Add(1)
						want.Add(actual)
					}
				})
				if ok, err := r.Cancel(ctx); err != nil {
					errc <- err
				} else if ok {
					won.Add(1)
				}
				inner.Wait()
				if won.Load() != 1 {
					errc <- fmt.Errorf("Settle(%d) and Cancel on copies: %d winners, want 1", actual, won.Load())
					return
				}
				winners.Add(1)
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if got := storedUnits(t, l.client, l, "k"); got != want.Load() {
		t.Fatalf("Redis holds %d units, want %d (settled and charged)", got, want.Load())
	}
	if winners.Load() < 100 {
		t.Fatalf("only %d reservations admitted", winners.Load())
	}
}
