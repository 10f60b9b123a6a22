package engine_test

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// waitAll waits for n goroutines that signal done, failing after a deadline
// rather than hanging the test.
func waitAll(t *testing.T, done <-chan struct{}, n int) {
	t.Helper()
	for range n {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("a goroutine did not finish")
		}
	}
}

// Copies of one reservation, settled and cancelled from many goroutines
// at once: exactly one call acts, and the key holds exactly what that one
// call left.
func TestSettleRacesCancelOnCopies(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 100, Window: time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true}
			e := newEngine(t, cfg)
			rng := rand.New(rand.NewPCG(1, uint64(alg)))
			for round := range scaled(100, 1000) {
				key := "k" + string(rune('a'+round%26))
				now := t0.Add(time.Duration(round) * 3 * time.Second) // every round in a fresh window
				r := e.ReserveAt(key, 10, now)
				require.True(t, r.Decision().Allowed)
				const G = 12
				actuals := make([]int64, G)
				for g := range actuals {
					actuals[g] = -1 // Cancel
					if g%3 != 0 {
						actuals[g] = rng.Int64N(30)
					}
				}
				var acted atomic.Int64
				var left atomic.Int64 // the units the winner left
				done := make(chan struct{})
				for g := range G {
					cp := r
					go func() {
						defer func() { done <- struct{}{} }()
						if actuals[g] < 0 {
							if cp.Cancel() {
								acted.Add(1)
								left.Store(0)
							}
							return
						}
						_, err := cp.SettleAt(actuals[g], now)
						switch {
						case err == nil:
							acted.Add(1)
							left.Store(actuals[g])
						case !errors.Is(err, engine.ErrSettled):
							t.Errorf("Settle: %v", err)
						}
					}()
				}
				waitAll(t, done, G)
				require.Equal(t, int64(1), acted.Load(), "round %d: one call acts", round)
				require.Equal(t, max(0, 100-left.Load()), e.AllowAt(key, 0, now).Remaining, "round %d", round)
			}
		})
	}
}

// Settles (to fewer and more units), charges and admissions racing on one
// key at one instant: no count is lost or doubled (a final SetLimit to a
// huge limit reads the exact count back), and the units admitted, less
// those given back, never pass the limit.
func TestSettleRacesDecisions(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 60
			cfg := engine.Config{Limit: limit, Window: time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true, PerKeyLimits: true, MaxLogLimit: 1 << 20}
			e := newEngine(t, cfg)
			now := t0
			var admitted, refunded, debts atomic.Int64
			const G = 8
			done := make(chan struct{})
			for g := range G {
				go func() {
					defer func() { done <- struct{}{} }()
					rng := rand.New(rand.NewPCG(uint64(g), 9))
					for range scaled(300, 3000) {
						n := 1 + rng.Int64N(4)
						switch x := rng.IntN(10); {
						case x < 3:
							if e.AllowAt("k", n, now).Allowed {
								admitted.Add(n)
							}
						case x < 4:
							if _, err := e.ChargeAt("k", n, now); err != nil {
								t.Errorf("ChargeAt: %v", err)
								return
							}
							debts.Add(n)
						default:
							r := e.ReserveAt("k", n, now)
							if !r.Decision().Allowed {
								continue
							}
							admitted.Add(n)
							actual := rng.Int64N(2*n + 1)
							if _, err := r.SettleAt(actual, now); err != nil {
								t.Errorf("SettleAt: %v", err)
								return
							}
							if actual < n {
								refunded.Add(n - actual)
							} else {
								debts.Add(actual - n)
							}
						}
					}
				}()
			}
			waitAll(t, done, G)
			net := admitted.Load() - refunded.Load()
			require.LessOrEqual(t, net, int64(limit), "admissions passed the limit")
			require.Positive(t, debts.Load())
			require.NoError(t, e.SetLimitAt("k", 1<<20, now))
			require.Equal(t, int64(1<<20)-net-debts.Load(), e.AllowAt("k", 0, now).Remaining, "every unit counted once")
		})
	}
}

// A reservation settled after its key was reclaimed, or retired by a far
// writer and replaced: the units it would give back count nowhere (nothing
// changes), and a debt is the key's, charged on its current state.
func TestSettleAcrossReclamation(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 4, Window: time.Second, SubWindows: 2, Algorithm: alg, Clock: clk, DisableEviction: true})
			fewer, more := e.Reserve("k", 3), e.Reserve("k", 1)
			require.True(t, fewer.Decision().Allowed && more.Decision().Allowed)
			clk.Advance(10 * time.Second)
			require.Equal(t, 1, e.Sweep(), "the idle key is reclaimed")
			n := e.Reserve("k", 2)
			require.True(t, n.Decision().Allowed)
			d, err := fewer.Settle(0)
			require.NoError(t, err)
			require.Equal(t, int64(2), d.Remaining, "nothing was given back to the new state")
			d, err = more.Settle(3)
			require.NoError(t, err)
			require.Equal(t, int64(0), d.Remaining, "the debt of 2 is on the new state")
			require.True(t, n.Cancel())
			require.Equal(t, int64(2), e.AllowN("k", 0).Remaining)

			// A far writer retires the ring and replaces it.
			clk.Advance(10 * time.Second)
			old := e.Reserve("k", 2)
			far := clk.UnixNano() + (1<<21+5)*e.Width()
			if alg == engine.SlidingLog {
				far = clk.UnixNano() + 2*int64(time.Second)
			}
			require.True(t, e.AllowAt("k", 1, time.Unix(0, far)).Allowed)
			d, err = old.SettleAt(5, time.Unix(0, far))
			require.NoError(t, err)
			require.Equal(t, int64(0), d.Remaining, "1 + the debt of 3 on the replacement")
			require.False(t, d.Allowed, "one more unit does not fit")
			require.Equal(t, int64(0), e.AllowAt("k", 0, time.Unix(0, far)).Remaining)
		})
	}
}

// Settles racing a Sweep loop and the clock's jumps: reservations whose
// keys are reclaimed and revived under them. Nothing may panic or race,
// and once quiet every key's count is what its live state was given.
func TestSettleRacesEviction(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 20, Window: 100 * time.Millisecond, SubWindows: 4, Algorithm: alg, Clock: clk, MaxLogLimit: 1 << 12})
			var stop atomic.Bool
			sweeps := make(chan struct{})
			go func() {
				defer close(sweeps)
				for !stop.Load() {
					e.Sweep()
				}
			}()
			const G = 4
			done := make(chan struct{})
			for g := range G {
				go func() {
					defer func() { done <- struct{}{} }()
					rng := rand.New(rand.NewPCG(uint64(g), 11))
					var held []engine.Reservation
					for i := range scaled(2000, 20000) {
						if g == 0 && i%50 == 0 {
							clk.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
						}
						key := []string{"a", "b"}[rng.IntN(2)]
						if rng.IntN(2) == 0 || len(held) == 0 {
							if r := e.Reserve(key, 1+rng.Int64N(3)); r.Decision().Allowed {
								held = append(held, r)
							}
							continue
						}
						j := rng.IntN(len(held))
						if _, err := held[j].Settle(rng.Int64N(8)); err != nil && !errors.Is(err, engine.ErrDebtFull) {
							t.Errorf("Settle: %v", err)
							return
						}
						held = append(held[:j], held[j+1:]...)
					}
				}()
			}
			waitAll(t, done, G)
			stop.Store(true)
			<-sweeps
			clk.Advance(time.Second)
			for _, k := range []string{"a", "b"} {
				require.Equal(t, int64(20), e.AllowN(k, 0).Remaining, "%s: everything left the window", k)
				require.True(t, e.AllowN(k, 20).Allowed)
			}
		})
	}
}

// SetLimit under a reservation: the settle's refund and debt are counts,
// which a limit change keeps; the Decision is under the limit in force.
func TestSettleAfterSetLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		cfg := engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, PerKeyLimits: true, DisableEviction: true}
		e := newEngine(t, cfg)
		m := newModel(cfg)
		r := e.ReserveAt("k", 6, t0)
		_, mr := m.reserve("k", 6, t0.UnixNano())
		r2 := e.ReserveAt("k", 3, t0)
		_, mr2 := m.reserve("k", 3, t0.UnixNano())
		require.NoError(t, e.SetLimitAt("k", 4, t0.Add(ms)))
		m.setLimit("k", 4, t0.Add(ms).UnixNano())
		d, err := r.SettleAt(2, t0.Add(2*ms))
		require.NoError(t, err)
		require.Equal(t, m.settle(mr, 2, t0.Add(2*ms).UnixNano()), d, "%v", alg)
		require.NoError(t, e.SetLimitAt("k", 12, t0.Add(3*ms)))
		m.setLimit("k", 12, t0.Add(3*ms).UnixNano())
		d, err = r2.SettleAt(9, t0.Add(4*ms))
		require.NoError(t, err)
		require.Equal(t, m.settle(mr2, 9, t0.Add(4*ms).UnixNano()), d, "%v", alg)
		require.Equal(t, m.decide("k", 1, t0.Add(5*ms).UnixNano()), e.AllowAt("k", 1, t0.Add(5*ms)), "%v", alg)
	}
}

// SetLimit racing settles and decisions: every admission fits the limit in
// force, and the counts add up once the limit is raised for the read.
func TestSettleRacesSetLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 40, Window: time.Second, SubWindows: 4, Algorithm: alg, PerKeyLimits: true, DisableEviction: true, MaxLogLimit: 1 << 20}
			e := newEngine(t, cfg)
			now := t0
			var admitted, refunded, debts atomic.Int64
			var stop atomic.Bool
			changer := make(chan struct{})
			go func() {
				defer close(changer)
				rng := rand.New(rand.NewPCG(3, 3))
				for !stop.Load() {
					if err := e.SetLimitAt("k", 10+rng.Int64N(40), now); err != nil {
						t.Errorf("SetLimitAt: %v", err)
						return
					}
				}
			}()
			const G = 6
			done := make(chan struct{})
			for g := range G {
				go func() {
					defer func() { done <- struct{}{} }()
					rng := rand.New(rand.NewPCG(uint64(g), 5))
					for range scaled(300, 3000) {
						n := 1 + rng.Int64N(3)
						r := e.ReserveAt("k", n, now)
						if !r.Decision().Allowed {
							continue
						}
						admitted.Add(n)
						actual := rng.Int64N(2*n + 1)
						if _, err := r.SettleAt(actual, now); err != nil {
							t.Errorf("SettleAt: %v", err)
							return
						}
						if actual < n {
							refunded.Add(n - actual)
						} else {
							debts.Add(actual - n)
						}
					}
				}()
			}
			waitAll(t, done, G)
			stop.Store(true)
			<-changer
			net := admitted.Load() - refunded.Load()
			require.LessOrEqual(t, net, int64(49), "admissions passed every limit in force")
			require.NoError(t, e.SetLimitAt("k", 1<<20, now))
			require.Equal(t, int64(1<<20)-net-debts.Load(), e.AllowAt("k", 0, now).Remaining, "every unit counted once")
		})
	}
}

// A settle's debt, and a plain charge, racing the sweep that reclaims the
// key: "a debt is the key's, charged on its current state (the
// reservation's ring when it is still live, else the ring the table holds,
// created or replaced as for a decision)", and Sweep: "An increment racing
// with the reclamation is retried on a fresh state, never lost". So after
// the race the key counts the debt at now, whichever won: a lost debt
// would let the next requests be admitted past it (a false admission).
func TestDebtRacesReclamation(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(debtAt(0))
			e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Clock: clk, SweepInterval: time.Hour, MaxLogLimit: 1000})
			for i := range 400 {
				key := "k" + strconv.Itoa(i%7)
				now := debtAt(clk.UnixNano() - debtBase.UnixNano())
				r := e.ReserveAt(key, 2, now)
				require.True(t, r.Decision().Allowed, "iteration %d", i)
				clk.Advance(5 * time.Second) // the key is idle long enough to be reclaimed
				now = debtAt(clk.UnixNano() - debtBase.UnixNano())
				start := make(chan struct{})
				var wg sync.WaitGroup
				wg.Add(2)
				go func() {
					defer wg.Done()
					<-start
					e.Sweep()
				}()
				go func() {
					defer wg.Done()
					<-start
					var err error
					if i%2 == 0 {
						_, err = r.SettleAt(2+7, now) // a debt of 7
					} else {
						_, err = e.ChargeAt(key, 7, now)
					}
					require.NoError(t, err)
				}()
				close(start)
				wg.Wait()
				require.Equal(t, int64(3), e.AllowAt(key, 0, now).Remaining, "iteration %d: the debt of 7 at now", i)
				require.True(t, e.AllowAt(key, 3, now).Allowed)
				require.False(t, e.AllowAt(key, 1, now).Allowed, "iteration %d", i)
			}
			require.Greater(t, e.Stats().Evicted, int64(100), "the sweeps reclaimed keys under the settles")
		})
	}
}
