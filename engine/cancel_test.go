package engine_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// Cancel never reaches a state that was reclaimed, retired and replaced,
// or grown; with the log it follows a growth.
func TestCancelAcrossReclamation(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2, Algorithm: alg, Clock: clk, DisableEviction: true})
			r := e.Reserve("k", 3)
			require.True(t, r.Decision().Allowed)
			clk.Advance(10 * time.Second)
			require.Equal(t, 1, e.Sweep(), "the idle key is reclaimed")
			// The key starts fresh and is used again; the old
			// reservation's Cancel must not touch the new state.
			n := e.Reserve("k", 4)
			require.True(t, n.Decision().Allowed)
			require.False(t, r.Cancel(), "Cancel on a reclaimed state")
			require.Equal(t, int64(0), e.AllowN("k", 0).Remaining, "the new state's count is untouched")
			require.True(t, n.Cancel())
			require.Equal(t, int64(4), e.AllowN("k", 0).Remaining)

			// A far writer retires the ring and replaces it.
			r2 := e.Reserve("k", 2)
			require.True(t, r2.Decision().Allowed)
			far := clk.UnixNano() + (1<<21+5)*e.Width()
			if alg == engine.SlidingLog {
				far = clk.UnixNano() + 2*int64(time.Second)
			}
			d := e.AllowAt("k", 4, time.Unix(0, far))
			require.True(t, d.Allowed, "%+v", d)
			require.False(t, r2.Cancel(), "Cancel on a retired and replaced state")
			require.Equal(t, int64(0), e.AllowAt("k", 0, time.Unix(0, far)).Remaining)
		})
	}
}

// A writer far enough ahead to settle (clear) the key's stale slots, but
// not to retire the ring: the reservation's sub-window has left the window
// and its slot holds another epoch; Cancel changes nothing.
func TestCancelAfterSettle(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		e := newEngine(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2, Algorithm: alg, DisableEviction: true})
		r := e.ReserveAt("k", 3, t0)
		require.True(t, r.Decision().Allowed)
		far := t0.Add(time.Duration((1<<20 + 3) * e.Width()))
		require.True(t, e.AllowAt("k", 4, far).Allowed, "%v", alg)
		require.False(t, r.Cancel(), "%v", alg)
		require.Equal(t, int64(0), e.AllowAt("k", 0, far).Remaining, "%v", alg)
		// And a slot of the same index, one window of slots on: same
		// index, another tag.
		e2 := newEngine(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2, Algorithm: alg, DisableEviction: true})
		r2 := e2.ReserveAt("k", 3, t0)
		next := t0.Add(time.Duration((int64(e2.Span()) + 1) * e2.Width()))
		require.True(t, e2.AllowAt("k", 2, next).Allowed, "%v", alg)
		require.False(t, r2.Cancel(), "%v: the slot holds a newer sub-window", alg)
		require.Equal(t, int64(2), e2.AllowAt("k", 0, next).Remaining, "%v", alg)
	}
}

func TestCancelFollowsAGrownLog(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.SlidingLog, Clock: clk, PerKeyLimits: true, DisableEviction: true})
	r := e.Reserve("k", 3)
	other := e.Reserve("k", 1)
	require.True(t, r.Decision().Allowed && other.Decision().Allowed)
	require.NoError(t, e.SetLimit("k", 8)) // moves the log into a larger ring
	require.NoError(t, e.SetLimit("k", 6))
	require.NoError(t, e.SetLimit("k", 16)) // and again
	require.True(t, r.Cancel(), "the units moved with the log")
	require.False(t, r.Cancel())
	require.Equal(t, int64(15), e.AllowN("k", 0).Remaining, "the other reservation's unit stays")
}

// Copies: each value cancels once; a Reservation is documented as not to be
// copied, and Cancel through one pointer from many goroutines returns the
// units exactly once.
func TestCancelConcurrentOnOneReservation(t *testing.T) {
	for _, alg := range allAlgorithms {
		e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: alg, DisableEviction: true})
		r := e.ReserveAt("k", 4, t0)
		keep := e.ReserveAt("k", 6, t0)
		require.True(t, r.Decision().Allowed && keep.Decision().Allowed)
		var won [8]bool
		done := make(chan int)
		for g := range won {
			go func() { won[g] = r.Cancel(); done <- g }()
		}
		for range won {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Cancel did not return")
			}
		}
		wins := 0
		for _, w := range won {
			if w {
				wins++
			}
		}
		require.Equal(t, 1, wins, "%v: exactly one Cancel returns the units", alg)
		require.Equal(t, int64(4), e.AllowAt("k", 0, t0).Remaining, "%v", alg)
	}
}

// Goroutines reserve and cancel on one key at one instant: whatever the
// interleaving, the key's count is exactly the units admitted and not
// cancelled, so it never held more than the limit, and nothing was lost or
// returned twice.
func TestReserveCancelConcurrentBurst(t *testing.T) {
	const goroutines, rounds = 8, 400
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 25, Window: time.Second, SubWindows: 5, Algorithm: alg, DisableEviction: true})
			kept := make([]int64, goroutines)
			errs := make(chan string, goroutines)
			done := make(chan struct{})
			for g := range goroutines {
				go func() {
					defer func() { done <- struct{}{} }()
					rng := rand.New(rand.NewPCG(uint64(g), 5))
					var mine []engine.Reservation
					returned := map[int]bool{}
					for range rounds {
						mine = append(mine, e.ReserveAt("k", 1+rng.Int64N(3), t0))
						if d := mine[len(mine)-1].Decision(); d.Remaining < 0 || d.Remaining > 25 {
							errs <- fmt.Sprintf("Remaining %d", d.Remaining)
							return
						}
						if rng.IntN(2) == 0 {
							i := rng.IntN(len(mine))
							if mine[i].Cancel() {
								if !mine[i].Decision().Allowed || returned[i] {
									errs <- "Cancel returned units it did not hold"
									return
								}
								returned[i] = true
							}
						}
					}
					for i := range mine {
						if !returned[i] {
							kept[g] += mine[i].Units()
						}
					}
				}()
			}
			for range goroutines {
				select {
				case <-done:
				case msg := <-errs:
					t.Fatal(msg)
				case <-time.After(30 * time.Second):
					t.Fatal("the burst did not finish")
				}
			}
			var sum int64
			for _, k := range kept {
				sum += k
			}
			require.LessOrEqual(t, sum, int64(25))
			require.Equal(t, 25-sum, e.AllowAt("k", 0, t0).Remaining, "the count is the units admitted and not cancelled")
		})
	}
}

// Reserves and cancels on a log key race SetLimit, which moves
// the log into a larger allocation again and again (retiring the one the
// reservations point to). The count must come out exact, and every kept
// reservation must then cancel, wherever its log went.
// The race it found (a lock-free lookup returning the log Grow had just
// retired) showed in about 1 run in 20, so it runs 10 times.
func TestCancelRacesLogGrowth(t *testing.T) {
	for range 10 {
		cancelRacesLogGrowth(t)
	}
}

func cancelRacesLogGrowth(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: engine.SlidingLog, Clock: clk, PerKeyLimits: true, DisableEviction: true, MaxLogLimit: 4096})
	const goroutines, rounds = 4, 300
	var mine [goroutines][]engine.Reservation
	var returned [goroutines]map[int]bool
	done := make(chan struct{})
	grown := make(chan int64)
	go func() {
		l := int64(4)
		for {
			select {
			case <-done:
				grown <- l
				return
			default:
			}
			if l < 4096 {
				l++
				if err := e.SetLimit("k", l); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	fin := make(chan struct{})
	for g := range goroutines {
		returned[g] = map[int]bool{}
		go func() {
			defer func() { fin <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for range rounds {
				mine[g] = append(mine[g], e.ReserveAt("k", 1+rng.Int64N(2), t0))
				if rng.IntN(2) == 0 {
					i := rng.IntN(len(mine[g]))
					if mine[g][i].Cancel() {
						returned[g][i] = true
					}
				}
			}
		}()
	}
	for range goroutines {
		<-fin
	}
	close(done)
	limit := <-grown
	var sum int64
	for g := range goroutines {
		for i := range mine[g] {
			if !returned[g][i] {
				sum += mine[g][i].Units()
			}
		}
	}
	require.Positive(t, sum)
	require.Equal(t, limit-sum, e.AllowAt("k", 0, t0).Remaining, "limit %d, %d units kept", limit, sum)
	for g := range goroutines {
		for i := range mine[g] {
			if !returned[g][i] && mine[g][i].Units() > 0 {
				require.True(t, mine[g][i].Cancel(), "a kept reservation, still inside the window, cancels")
			}
		}
	}
	require.Equal(t, limit, e.AllowAt("k", 0, t0).Remaining)
}

// Cancel at the boundary (a regression: the doc
// said N sub-windows later, the code and design §3b say N+1): at sub-window
// e+N the sliding window still counts e's units, so Cancel returns them;
// from e+N+1 on it returns false and changes nothing.
func TestCancelAtWindowEndBoundary(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict} {
		t.Run(alg.String(), func(t *testing.T) {
			for _, c := range []struct {
				later int // sub-windows after the reservation's
				want  bool
			}{{4, true}, {5, false}} {
				e := newEngineNoCloseCheck(t, engine.Config{Limit: 4, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true})
				r := e.ReserveAt("k", 2, t0)
				if !r.Decision().Allowed {
					t.Fatal("denied")
				}
				at := r.At().Add(time.Duration(c.later) * time.Second)
				e.AllowAt("k", 1, at)
				before := e.AllowAt("k", 0, at).Remaining
				got := r.Cancel()
				after := e.AllowAt("k", 0, at).Remaining
				if got != c.want || (after != before) != c.want || c.want && after != before+2 {
					t.Errorf("%d sub-windows later: Cancel = %v (want %v), remaining %d -> %d", c.later, got, c.want, before, after)
				}
			}
		})
	}
}

func TestCancelBoundariesExact(t *testing.T) {
	W := 4 * time.Second
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		at := t0.Add(1500 * time.Millisecond) // mid sub-window
		var lastTrue, firstFalse time.Time
		switch alg {
		case engine.FixedWindow:
			ws := time.Unix(0, at.UnixNano()/int64(W)*int64(W))
			firstFalse = ws.Add(W)
		case engine.SlidingLog:
			firstFalse = at.Add(W)
		default:
			firstFalse = at.Truncate(time.Second).Add(W + time.Second)
		}
		lastTrue = firstFalse.Add(-1)
		for _, c := range []struct {
			when time.Time
			want bool
		}{{lastTrue, true}, {firstFalse, false}} {
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 4, Window: W, SubWindows: 4, Algorithm: alg, DisableEviction: true})
			r := e.ReserveAt("k", 2, at)
			e.AllowAt("k", 1, c.when)
			if got := r.Cancel(); got != c.want {
				t.Errorf("%v: request at At+%v, Cancel %v, want %v", alg, c.when.Sub(r.At()), got, c.want)
			}
		}
	}
}

// UpdateLimits growing a SlidingLog key, then Cancel.
func TestCancelAfterUpdateLimitsGrowth(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 2, Window: time.Second, Algorithm: engine.SlidingLog, PerKeyLimits: true, DisableEviction: true})
	r := e.ReserveAt("k", 2, t0)
	if err := e.UpdateLimits(func(string, int64) int64 { return 50 }); err != nil {
		t.Fatal(err)
	}
	r2 := e.ReserveAt("k", 40, t0)
	if err := e.UpdateLimits(func(string, int64) int64 { return 500 }); err != nil {
		t.Fatal(err)
	}
	if !r.Cancel() || !r2.Cancel() {
		t.Fatal("cancel after growth false")
	}
	if rem := e.AllowAt("k", 0, t0).Remaining; rem != 500 {
		t.Fatalf("remaining %d", rem)
	}
}
