package engine_test

// Refunds (settles below the reservation, in-flight give-backs) racing
// admissions and a log's growth: never past the limit, nothing lost.

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// Reservations settled to at most their units (refunds only, no debt),
// racing admissions on one key at instants that cross sub-window boundaries:
// a reservation's units are live from its admission until its settle, so
// a counter raised after each admission and lowered before each settle never
// exceeds the limit (Strict and SlidingLog: "No window of length Window ever
// holds more than Limit", and the whole run fits in one window here).
// Afterwards the self-audit reports no false admit.
func TestSettleRefundsRacingAdmissions(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 20
			e := newEngine(t, engine.Config{Limit: limit, Window: time.Hour, SubWindows: 4, Algorithm: alg, DisableEviction: true, Audit: 1, AuditBuffer: 1 << 16})
			var live, most atomic.Int64
			var clock atomic.Int64 // ns after debtBase, moves forward within the first sub-window
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					for range raceIters(3000) {
						now := debtAt(clock.Add(int64(rng.IntN(1000))))
						n := 1 + rng.Int64N(3)
						r := e.ReserveAt("k", n, now)
						if !r.Decision().Allowed {
							runtime.Gosched()
							continue
						}
						v := live.Add(n)
						for {
							o := most.Load()
							if v <= o || most.CompareAndSwap(o, v) {
								break
							}
						}
						runtime.Gosched()
						actual := int64(0) // all back (Settle(0) is Cancel), so that the key churns
						live.Add(-n)
						if _, err := r.SettleAt(actual, now); err != nil {
							t.Error(err)
							return
						}
						live.Add(actual) // still counted until the window ends
						_ = actual
					}
				}()
			}
			wg.Wait()
			require.LessOrEqual(t, most.Load(), int64(limit), "live units at once")
			rep := e.Audit()
			require.Zero(t, rep.FalseAdmits, "%+v", rep)
			require.Greater(t, rep.Admits, int64(raceIters(3000)/3), "%+v", rep)
		})
	}
}

// SlidingLog: a settle's refund racing a charge (or a SetLimit) that moves
// the key's log into a larger allocation. design.md §3b: "Cancel follows
// the key's current ring and removes them there"; Cancel "reports whether
// it did", and a settle's refund is Cancel's. Whichever goes first, the
// count afterwards is the charge plus what the settle kept.
func TestLogRefundRacesGrowth(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 100, Window: time.Hour, Algorithm: engine.SlidingLog, DisableEviction: true, MaxLogLimit: 100_000, PerKeyLimits: true})
	at := debtAt(0)
	for i := range 300 {
		key := "k" + strconv.Itoa(i)
		r := e.ReserveAt(key, 50, at)
		require.True(t, r.Decision().Allowed)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var refunded atomic.Bool
		keep := int64(i % 3 * 10) // 0, 10, 20
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			if i%2 == 0 {
				_, err := e.ChargeAt(key, 60, at)
				require.NoError(t, err)
			} else {
				require.NoError(t, e.SetLimitAt(key, 1000, at))
				_, err := e.ChargeAt(key, 60, at)
				require.NoError(t, err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			if keep == 0 {
				refunded.Store(r.Cancel())
				return
			}
			_, err := r.SettleAt(keep, at)
			refunded.Store(err == nil)
		}()
		close(start)
		wg.Wait()
		require.True(t, refunded.Load(), "iteration %d", i)
		limit := int64(100)
		if i%2 == 1 {
			limit = 1000
		}
		require.Equal(t, max(0, limit-60-keep), e.AllowAt(key, 0, at).Remaining, "iteration %d: kept %d", i, keep)
	}
}

// Strict, in flight, across sub-window boundaries: reservations settled to
// fewer units (mostly 0) race admissions at instants that move through
// many sub-windows. SlidingWindowStrict: "no window of length Window ever
// holds more than Limit admitted units", which for counting means any N+1
// consecutive sub-windows hold at most L (design.md §1). Each goroutine
// adds its reservation's units to its sub-window's tally after the engine
// admitted them, and takes back what it returns before returning it, so a
// tally never exceeds what the engine holds; after each admission at
// epoch E the tallies of E−N … E must sum to at most L.
func TestInFlightStrictAcrossSubWindows(t *testing.T) {
	const limit, n = 12, 4
	w := 10 * time.Millisecond
	e := newEngine(t, engine.Config{Limit: limit, Window: n * w, SubWindows: n, Algorithm: engine.SlidingWindowStrict, DisableEviction: true})
	const epochs = 200
	var tally [epochs + n + 2]atomic.Int64
	base := debtBase.UnixNano() / int64(w)
	var clock atomic.Int64
	var worst atomic.Int64
	var admitted atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 6000 {
				ns := clock.Add(int64(rng.IntN(40_000)))
				if ns >= int64(epochs)*int64(w) {
					return
				}
				now := debtAt(ns)
				k := 1 + rng.Int64N(3)
				r := e.ReserveAt("k", k, now)
				if !r.Decision().Allowed {
					continue
				}
				admitted.Add(1)
				ep := r.At().UnixNano()/int64(w) - base
				// The tally is summed as one snapshot (under mu): summed
				// entry by entry while others change it, a unit returned
				// after its entry was read and one admitted into a later
				// entry read after would both count, never live together.
				// It counts a unit after the engine admitted it and stops
				// before the engine gets it back, so it never exceeds the
				// units live.
				mu.Lock()
				tally[ep].Add(k)
				var sum int64
				for x := max(0, ep-n); x <= ep; x++ {
					sum += tally[x].Load()
				}
				mu.Unlock()
				for {
					o := worst.Load()
					if sum <= o || worst.CompareAndSwap(o, sum) {
						break
					}
				}
				runtime.Gosched()
				keep := int64(0)
				if rng.IntN(8) == 0 {
					keep = rng.Int64N(k)
				}
				mu.Lock()
				tally[ep].Add(keep - k)
				mu.Unlock()
				if _, err := r.SettleAt(keep, debtAt(clock.Load())); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Greater(t, admitted.Load(), int64(2000))
	require.LessOrEqual(t, worst.Load(), int64(limit), "units live in N+1 consecutive sub-windows")
}

// raceIters is n, or a quarter of it under the race detector, whose
// slowdown would make these runs take half a minute each.
func raceIters(n int) int {
	if raceOn {
		return n / 4
	}
	return n
}
