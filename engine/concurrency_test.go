package engine_test

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

var allAlgorithms = []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog}

// burst runs fn on 8×GOMAXPROCS goroutines released together, and collects
// their errors through a channel with a deadline.
func burst(t *testing.T, fn func(g int) error) {
	t.Helper()
	g := 8 * runtime.GOMAXPROCS(0)
	start := make(chan struct{})
	errs := make(chan error, g)
	for i := 0; i < g; i++ {
		go func() {
			<-start
			errs <- fn(i)
		}()
	}
	close(start)
	deadline := time.After(30 * time.Second)
	for i := 0; i < g; i++ {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case <-deadline:
			t.Fatalf("burst: %d of %d goroutines did not finish", g-i, g)
		}
	}
}

// fillAt admits single units at t until refused and returns how many fit.
func fillAt(e *engine.Engine, key string, t time.Time) int64 {
	var n int64
	for e.AllowAt(key, 1, t).Allowed {
		n++
	}
	return n
}

// requireExactlyFull checks, with the reference estimate, that the key's
// admitted log is within the limit at t and that not one more unit fits:
// no count was lost and none was left behind by a failed attempt.
func requireExactlyFull(t *testing.T, ref *refLimiter, k *refKey, at time.Time, msg string) {
	t.Helper()
	est := ref.estimate(k, at.UnixNano())
	require.LessOrEqual(t, est.Cmp(big.NewRat(ref.limit, 1)), 0, "%s: admitted beyond the limit (estimate %s)", msg, est.FloatString(3))
	require.False(t, ref.fits(k, at.UnixNano(), 1), "%s: capacity left unused (estimate %s)", msg, est.FloatString(3))
}

func TestConcurrentBurstAtOneInstant(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 1000, Window: time.Second, Algorithm: alg, DisableEviction: true}
			e := newEngine(t, cfg)
			ref := newRef(cfg)
			k := &refKey{}
			// Earlier traffic, so that the weighted oldest slot matters.
			pre := t0.Add(-time.Second + 50*time.Millisecond)
			require.True(t, e.AllowAt("k", 300, pre).Allowed)
			k.log = append(k.log, refEvent{pre.UnixNano(), 300})
			at := t0.Add(30 * time.Millisecond)
			var admitted atomic.Int64
			burst(t, func(g int) error {
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for i := 0; i < 300; i++ {
					n := 1 + rng.Int64N(3)
					d := e.AllowAt("k", n, at)
					if d.Allowed {
						admitted.Add(n)
					} else if d.Reason() != engine.ReasonLimited {
						return fmt.Errorf("unexpected denial %+v", d)
					}
				}
				return nil
			})
			seq := fillAt(e, "k", at)
			k.log = append(k.log, refEvent{at.UnixNano(), admitted.Load() + seq})
			requireExactlyFull(t, ref, k, at, "after the burst and a sequential fill")
			require.Zero(t, e.AllowAt("k", 0, at).Remaining)
		})
	}
}

// Phases at instants that move forward across sub-window and window
// boundaries; each phase is a concurrent burst on a few keys, then a
// sequential fill, checked against the reference.
func TestConcurrentPhasesWithTimeMoving(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 200, Window: time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true}
			e := newEngine(t, cfg)
			ref := newRef(cfg)
			keys := []string{"a", "b", "c"}
			logs := map[string]*refKey{}
			for _, k := range keys {
				logs[k] = &refKey{}
			}
			rng := rand.New(rand.NewPCG(7, uint64(alg)))
			at := t0
			for phase := 0; phase < 12; phase++ {
				at = at.Add(time.Duration(rng.Int64N(int64(700 * time.Millisecond))))
				var admitted [3]atomic.Int64
				burst(t, func(g int) error {
					r := rand.New(rand.NewPCG(uint64(g), uint64(phase)))
					for i := 0; i < 100; i++ {
						j := r.IntN(len(keys))
						n := 1 + r.Int64N(4)
						if e.AllowAt(keys[j], n, at).Allowed {
							admitted[j].Add(n)
						}
					}
					return nil
				})
				for j, k := range keys {
					got := admitted[j].Load() + fillAt(e, k, at)
					logs[k].log = append(logs[k].log, refEvent{at.UnixNano(), got})
					requireExactlyFull(t, ref, logs[k], at, fmt.Sprintf("phase %d key %s", phase, k))
				}
			}
		})
	}
}

// Writers straddle a sub-window boundary: half at b−1ns, half at b, racing
// to publish the new epoch (the log: its newest time). Units at both
// instants count in full at both, so together with the earlier traffic they
// must fill the limit exactly.
func TestConcurrentBoundaryRace(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 500, Window: time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true}
			e := newEngine(t, cfg)
			w := 250 * time.Millisecond
			for round := 0; round < 20; round++ {
				key := fmt.Sprint("k", round)
				b := t0.Add(time.Duration(round) * 10 * time.Second)
				require.True(t, e.AllowAt(key, 100, b.Add(-w/2)).Allowed)
				var admitted atomic.Int64
				burst(t, func(g int) error {
					at := b
					if g%2 == 0 {
						at = b.Add(-1)
					}
					for i := 0; i < 100; i++ {
						if e.AllowAt(key, 1+int64(i%2), at).Allowed {
							admitted.Add(1 + int64(i%2))
						}
					}
					return nil
				})
				total := 100 + admitted.Load() + fillAt(e, key, b)
				require.Equal(t, cfg.Limit, total, "round %d: the window must hold exactly the limit", round)
			}
		})
	}
}

// The sweeper retires idle rings while writers arrive at a new instant: a
// writer that loaded a ring just before it was retired must retry on a fresh
// one, so every key still admits exactly its limit in each phase.
func TestEvictionRacingWriters(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) { testEvictionRacingWriters(t, alg) })
	}
}

func testEvictionRacingWriters(t *testing.T, alg engine.Algorithm) {
	clk := engine.NewManualClock(t0)
	cfg := engine.Config{Limit: 50, Window: time.Second, Algorithm: alg, Clock: clk, SweepInterval: time.Hour}
	e := newEngine(t, cfg)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var swept atomic.Int64
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				swept.Add(int64(e.Sweep()))
			}
		}
	}()
	for phase := 0; phase < 15; phase++ {
		clk.Advance(cfg.Window + 200*time.Millisecond) // every key idle
		counts := make([]atomic.Int64, len(keys))
		burst(t, func(g int) error {
			for i := 0; i < 400; i++ {
				j := (g*7 + i) % len(keys)
				if e.Allow(keys[j]) {
					counts[j].Add(1)
				}
			}
			return nil
		})
		for j := range keys {
			got := counts[j].Load() + fillAt(e, keys[j], time.Unix(0, clk.UnixNano()))
			require.Equal(t, cfg.Limit, got, "phase %d key %s", phase, keys[j])
		}
	}
	// The sweeper must be live: make every key idle and wait for it.
	clk.Advance(cfg.Window + 200*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for swept.Load() == 0 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	close(stop)
	<-done
	require.Greater(t, swept.Load(), int64(0), "the sweeper never reclaimed anything")
}
