package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// Tests of Engine.Reset: what it forgets, what it keeps, reservations held
// across it, and Reset racing decisions, SetLimit, reservations and itself.
// The model-based scripts (reserve_test.go, property_test.go) run Reset
// beside every other operation against model.reset.

func TestResetForgetsTheCounts(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 5, Algorithm: alg, DisableEviction: true})
			require.False(t, e.Reset("k"), "a key never seen: nothing to reset")
			require.Equal(t, int64(0), e.Len(), "and nothing created")
			require.Equal(t, int64(5), fillAt(e, "k", t0))
			require.Equal(t, int64(5), fillAt(e, "other", t0))
			require.True(t, e.Reset("k"))
			require.Equal(t, int64(5), e.AllowAt("k", 0, t0).Remaining, "the fresh count is empty")
			require.Equal(t, int64(5), fillAt(e, "k", t0), "the whole limit again, at the same instant")
			require.Equal(t, int64(0), e.AllowAt("other", 0, t0).Remaining, "other keys keep their counts")
			require.Equal(t, int64(2), e.Len(), "the key stays one key")
			require.False(t, e.Reset(strings.Repeat("x", e.Config().MaxKeyBytes+1)), "a key too long is never held")
		})
	}
}

// A Reset is not a move of the key's time: decisions after it are made at
// the key's newest sub-window or later (SlidingLog: 1 ns after its newest
// time), never at an older time the caller gives.
func TestResetKeepsTheKeysTime(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, SubWindows: 5, Algorithm: alg, DisableEviction: true})
			late := t0.Add(700 * time.Millisecond)
			require.True(t, e.AllowAt("k", 5, late).Allowed)
			require.True(t, e.Reset("k"))
			r := e.ReserveAt("k", 5, t0) // older than the key's newest time
			require.True(t, r.Decision().Allowed)
			want := late
			switch alg {
			case engine.SlidingLog:
				want = late.Add(1)
			case engine.FixedWindow:
				want = late.Truncate(time.Second)
			default:
				want = late.Truncate(200 * time.Millisecond)
			}
			require.Equal(t, want.UnixNano(), r.At().UnixNano())
		})
	}
}

func TestResetKeepsTheKeysLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: alg, DisableEviction: true,
				KeyLimit: func(key string) int64 {
					if strings.HasPrefix(key, "pro:") {
						return 9
					}
					return 0
				}})
			require.NoError(t, e.SetLimitAt("k", 3, t0))
			require.Equal(t, int64(3), fillAt(e, "k", t0))
			require.Equal(t, int64(9), fillAt(e, "pro:a", t0))
			require.True(t, e.Reset("k"))
			require.True(t, e.Reset("pro:a"))
			require.Equal(t, int64(3), fillAt(e, "k", t0), "SetLimit's override is kept")
			require.Equal(t, int64(9), fillAt(e, "pro:a", t0), "KeyLimit's answer is kept")
			// A log grown by SetLimit keeps the grown limit.
			require.NoError(t, e.SetLimitAt("k", 20, t0))
			require.True(t, e.Reset("k"))
			require.Equal(t, int64(20), e.AllowAt("k", 0, t0).Limit)
		})
	}
}

// A Reservation admitted before a Reset gives nothing back into the fresh
// count: Cancel reports false, Settle below its units returns nothing; a
// debt above its units is charged to the key's current state.
func TestResetReservationHeldAcross(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2, Algorithm: alg, DisableEviction: true})
			a := e.ReserveAt("k", 3, t0)
			b := e.ReserveAt("k", 1, t0)
			c := e.ReserveAt("other", 2, t0)
			require.True(t, a.Decision().Allowed && b.Decision().Allowed && c.Decision().Allowed)
			require.True(t, e.Reset("k"))
			fresh := e.ReserveAt("k", 4, t0)
			require.True(t, fresh.Decision().Allowed)
			require.False(t, a.Cancel(), "a reservation from before the Reset refunds nothing")
			d, err := b.SettleAt(0, t0)
			require.NoError(t, err)
			require.Equal(t, int64(0), d.Remaining, "nor does Settle(0)")
			require.Equal(t, int64(0), e.AllowAt("k", 0, t0).Remaining, "the fresh count is untouched")
			require.True(t, c.Cancel(), "other keys' reservations are not touched")
			require.True(t, fresh.Cancel())
			require.Equal(t, int64(4), e.AllowAt("k", 0, t0).Remaining)

			// A debt is charged at its now, to the key's current state.
			g := e.ReserveAt("k", 1, t0)
			require.True(t, e.Reset("k"))
			d, err = g.SettleAt(3, t0)
			require.NoError(t, err)
			require.Equal(t, int64(2), d.Remaining, "the debt of 2 counts in the fresh state")
		})
	}
}

// A log grown by SetLimit is followed by Cancel into its new allocation;
// after a Reset, Cancel must not follow into the fresh log, which may hold
// units of the same instant.
func TestResetCancelDoesNotFollowIntoTheFreshLog(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.SlidingLog, PerKeyLimits: true, DisableEviction: true})
	r := e.ReserveAt("k", 3, t0)
	require.True(t, r.Decision().Allowed)
	require.NoError(t, e.SetLimitAt("k", 8, t0)) // moves the log into a larger ring
	require.True(t, e.Reset("k"))
	require.Equal(t, int64(8), fillAt(e, "k", t0))
	require.False(t, r.Cancel(), "the old units are not in the fresh log")
	require.Equal(t, int64(0), e.AllowAt("k", 0, t0).Remaining)
}

func TestResetUnderMaxKeys(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 2, Window: time.Second, MaxKeys: 1, DisableEviction: true})
	require.Equal(t, int64(2), fillAt(e, "a", t0))
	require.True(t, e.Reset("a"))
	require.Equal(t, int64(1), e.Len(), "a reset key keeps its place")
	require.Equal(t, engine.ReasonKeysFull, e.AllowAt("b", 1, t0).Reason(), "and frees none")
	require.Equal(t, int64(2), fillAt(e, "a", t0))
}

// A Reset is not activity: the reset key is reclaimed when idle, by the
// time of its newest decision, as before.
func TestResetKeyIsReclaimedWhenIdle(t *testing.T) {
	for _, alg := range allAlgorithms {
		clk := engine.NewManualClock(t0)
		e := newEngine(t, engine.Config{Limit: 2, Window: time.Second, Algorithm: alg, Clock: clk, DisableEviction: true})
		require.True(t, e.Allow("k"))
		clk.Advance(5 * time.Second)
		require.True(t, e.Reset("k"))
		require.Equal(t, 1, e.Sweep(), "%v", alg)
		require.False(t, e.Reset("k"), "%v: reclaimed", alg)
	}
}

// Decisions racing Resets at one instant: with a hard bound (Strict, the
// log) each count between two Resets admits at most Limit units, so all
// the admissions together are at most Limit × (Resets + 1). A count lost
// in a Reset's race (an admission reported on the retired state after the
// Reset) would let more through.
func TestResetRacingDecisions(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 20
			e := newEngine(t, engine.Config{Limit: limit, Window: time.Second, Algorithm: alg, DisableEviction: true})
			require.True(t, e.AllowAt("k", 1, t0).Allowed) // the key exists from the start
			var admitted, resets atomic.Int64
			admitted.Store(1)
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if e.Reset("k") {
						resets.Add(1)
					}
				}
			}()
			burst(t, func(g int) error {
				for i := 0; i < 2000; i++ {
					if e.AllowAt("k", 1, t0).Allowed {
						admitted.Add(1)
					}
				}
				return nil
			})
			stop.Store(true)
			wg.Wait()
			require.LessOrEqual(t, admitted.Load(), limit*(resets.Load()+1))
			// And the count after the last Reset is exact.
			require.True(t, e.Reset("k"))
			require.Equal(t, int64(limit), fillAt(e, "k", t0))
		})
	}
}

// Reservations racing Resets: after the last Reset, no reservation taken
// before it gives anything back into the fresh count, whichever copy
// cancels or settles.
func TestResetRacingReservations(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 16
			e := newEngine(t, engine.Config{Limit: limit, Window: time.Second, Algorithm: alg, PerKeyLimits: true, DisableEviction: true})
			var mu sync.Mutex
			held := []engine.Reservation{e.ReserveAt("k", 1, t0)}
			var stop atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; !stop.Load(); i++ {
					e.Reset("k")
					if alg == engine.SlidingLog && i%50 == 0 {
						_ = e.SetLimitAt("k", limit+int64(i%1000), t0) // a grown log across Resets
						_ = e.SetLimitAt("k", limit, t0)
					}
				}
			}()
			burst(t, func(g int) error {
				for i := 0; i < 1000; i++ {
					r := e.ReserveAt("k", 1, t0)
					if !r.Decision().Allowed {
						continue
					}
					if i%3 == 0 {
						r.Cancel()
						continue
					}
					mu.Lock()
					held = append(held, r)
					mu.Unlock()
				}
				return nil
			})
			stop.Store(true)
			<-done
			require.True(t, e.Reset("k"))
			require.Equal(t, int64(limit), fillAt(e, "k", t0))
			for i := range held {
				require.False(t, held[i].Cancel(), "reservation %d refunded into the fresh count", i)
			}
			require.Equal(t, int64(0), e.AllowAt("k", 0, t0).Remaining)
		})
	}
}

// SetLimit racing Reset: the limit a SetLimit set, once it returned, is
// the key's limit after every Reset (it is read after the old state is
// retired; a SetLimit after that finds it retired and sets the fresh one).
func TestResetRacingSetLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: alg, PerKeyLimits: true, DisableEviction: true})
			require.True(t, e.AllowAt("k", 1, t0).Allowed)
			for round := 0; round < 200; round++ {
				want := int64(1 + round%7)
				var wg sync.WaitGroup
				errs := make(chan error, 2)
				wg.Add(2)
				go func() { defer wg.Done(); errs <- e.SetLimitAt("k", want, t0) }()
				go func() {
					defer wg.Done()
					if !e.Reset("k") {
						errs <- errors.New("the key vanished")
					}
				}()
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				require.Equal(t, want, e.AllowAt("k", 0, t0).Limit, "round %d", round)
			}
		})
	}
}

// Resets racing each other and the sweeper: every Reset returns, the key
// stays one key, and its count afterwards is exact.
func TestResetRacingItselfAndSweep(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 8, Window: time.Second, Algorithm: alg, Clock: clk, DisableEviction: true})
			for round := 0; round < 50; round++ {
				now := time.Unix(0, clk.UnixNano())
				e.AllowAt(fmt.Sprint("k", round%3), 3, now)
				burst(t, func(g int) error {
					switch g % 3 {
					case 0:
						e.Reset(fmt.Sprint("k", round%3))
					case 1:
						e.AllowAt(fmt.Sprint("k", round%3), 1, now)
					default:
						e.Sweep()
					}
					return nil
				})
				clk.Advance(700 * time.Millisecond)
			}
			require.LessOrEqual(t, e.Len(), int64(3))
			for k := 0; k < 3; k++ {
				e.Reset(fmt.Sprint("k", k))
				require.Equal(t, int64(8), fillAt(e, fmt.Sprint("k", k), time.Unix(0, clk.UnixNano())))
			}
		})
	}
}
