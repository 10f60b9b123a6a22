package engine_test

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
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
func requireExactlyFull(t *testing.T, ref *model, k *modelKey, at time.Time, msg string) {
	t.Helper()
	num, den := ref.estimate(k, at.UnixNano())
	est := new(big.Rat).SetFrac(num, den).FloatString(3)
	require.True(t, ref.fits(k, at.UnixNano(), 0, ref.limit), "%s: admitted beyond the limit (estimate %s)", msg, est)
	require.False(t, ref.fits(k, at.UnixNano(), 1, ref.limit), "%s: capacity left unused (estimate %s)", msg, est)
}

func TestConcurrentBurstAtOneInstant(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := engine.Config{Limit: 1000, Window: time.Second, Algorithm: alg, DisableEviction: true}
			e := newEngine(t, cfg)
			ref := newModel(cfg)
			k := &modelKey{}
			// Earlier traffic, so that the weighted oldest slot matters.
			pre := t0.Add(-time.Second + 50*time.Millisecond)
			require.True(t, e.AllowAt("k", 300, pre).Allowed)
			k.log = append(k.log, modelEvent{t: pre.UnixNano(), n: 300})
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
			k.log = append(k.log, modelEvent{t: at.UnixNano(), n: admitted.Load() + seq})
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
			ref := newModel(cfg)
			keys := []string{"a", "b", "c"}
			logs := map[string]*modelKey{}
			for _, k := range keys {
				logs[k] = &modelKey{}
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
					logs[k].log = append(logs[k].log, modelEvent{t: at.UnixNano(), n: got})
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

type admission struct {
	key string
	eff int64
	n   int64
}

// Writers at the present, far-ahead writers (≥ 2^21
// sub-windows), backward times, a Sweep loop beside the background sweeper,
// and SetLimit (log: Grow from a small KeyLimit), all on a few keys; every
// admission is checked by its effective epoch against the counting bounds.
// Writers never use a time older than the sweeper's now (see TestWriterBehindSweepDoesNotReviveKeyInThePast for
// what happens otherwise).
func TestRacingWritersStayWithinBounds(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, N := range []int{1, 3} {
			if (alg == engine.FixedWindow || alg == engine.SlidingLog) && N != 1 {
				continue
			}
			t.Run(fmt.Sprintf("%v/N=%d", alg, N), func(t *testing.T) { runRacingWritersBounds(t, alg, N) })
		}
	}
}

func runRacingWritersBounds(t *testing.T, alg engine.Algorithm, N int) {
	const L = 4
	W := 30 * time.Millisecond
	cfg := engine.Config{Limit: L, Window: W, SubWindows: N, Algorithm: alg, SweepInterval: time.Millisecond, Shards: 2,
		KeyLimit: func(k string) int64 {
			if alg == engine.SlidingLog {
				return 1 // grown by SetLimit to L
			}
			return 0
		}}
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		cfg.SubWindows = 0
	}
	base := time.Unix(1_700_000_000, 0)
	clk := engine.NewManualClock(base)
	cfg.Clock = clk
	e := newEngine(t, cfg)
	w := int64(W) / int64(max(N, 1))
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		w = int64(W)
	}
	keys := []string{"a", "b", "c"}
	const G = 4
	recs := make([][]admission, G)
	now := base.UnixNano()
	for phase := 0; phase < 300; phase++ {
		var wg sync.WaitGroup
		for g := 0; g < G; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), uint64(phase)))
				for i := 0; i < 40; i++ {
					k := keys[rng.IntN(len(keys))]
					var at int64
					switch rng.IntN(20) {
					case 0:
						if g == 0 && phase%50 == 7 {
							at = now + (1<<21)*w + rng.Int64N(w) // far ahead
						} else {
							at = now
						}
					case 1, 2:
						at = now - rng.Int64N(3*w) // behind the clock: clamped (never creates, mostly)
						if at < now {
							at = now // keep writers at or after the sweeper's now
						}
					case 3:
						_ = e.SetLimit(k, L)
						continue
					case 4:
						if g == 1 {
							e.Sweep()
						}
						continue
					default:
						at = now + rng.Int64N(w)
					}
					n := 1 + rng.Int64N(2)
					d, eff := e.AllowAtTrace(k, n, time.Unix(0, at))
					if d.Allowed {
						recs[g] = append(recs[g], admission{k, eff, n})
					}
				}
			}()
		}
		wg.Wait()
		now += rand.Int64N(2 * w)
		if phase%37 == 0 {
			now += 5 * int64(W)
		}
		clk.Set(time.Unix(0, now))
	}
	// Check.
	by := map[string][]admission{}
	for _, r := range recs {
		for _, a := range r {
			by[a.key] = append(by[a.key], a)
		}
	}
	for k, as := range by {
		sort.Slice(as, func(i, j int) bool { return as[i].eff < as[j].eff })
		for i := range as {
			var span int64 // consecutive sub-windows / ns
			switch alg {
			case engine.SlidingWindowStrict:
				span = int64(N) + 1
			case engine.SlidingWindow:
				span = int64(N)
			case engine.FixedWindow:
				span = 1
			case engine.SlidingLog:
				span = int64(W) // (x−W, x]: eff > x−W
			}
			var sum int64
			for j := i; j >= 0; j-- {
				if as[i].eff-as[j].eff >= span {
					break
				}
				sum += as[j].n
			}
			require.LessOrEqual(t, sum, int64(L), "key %q: window ending at eff %d holds %d", k, as[i].eff, sum)
		}
	}
}

// Concurrent bursts across sub-window boundaries leave no
// count behind: at quiescence, Remaining (a peek clamped to the start of the
// key's newest sub-window) equals Limit minus a recount of the admissions by
// effective epoch, and a sequential fill then admits exactly Remaining.
func TestRaceAtBoundaryLeavesNoResidue(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		for _, N := range []int{1, 2, 5} {
			if alg == engine.FixedWindow && N != 1 {
				continue
			}
			t.Run(fmt.Sprintf("%v/N=%d", alg, N), func(t *testing.T) {
				const L = 64
				cfg := engine.Config{Limit: L, Window: time.Duration(N) * 1000, SubWindows: N, Algorithm: alg, DisableEviction: true}
				w := int64(1000)
				if alg == engine.FixedWindow {
					cfg.SubWindows = 0
				}
				for round := 0; round < 200; round++ {
					e, err := engine.New(cfg)
					require.NoError(t, err)
					base := int64(1<<40) / w * w
					var mu sync.Mutex
					var adm []admission
					var wg sync.WaitGroup
					for g := 0; g < 4; g++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							rng := rand.New(rand.NewPCG(uint64(g), uint64(round)))
							var mine []admission
							for i := 0; i < 60; i++ {
								// times around the boundaries of 3 consecutive sub-windows
								at := base + int64(rng.IntN(3))*w + []int64{0, w - 1, 1, w / 2}[rng.IntN(4)]
								n := 1 + rng.Int64N(3)
								d, eff := e.AllowAtTrace("k", n, time.Unix(0, at))
								if d.Allowed {
									mine = append(mine, admission{"k", eff, n})
								}
							}
							mu.Lock()
							adm = append(adm, mine...)
							mu.Unlock()
						}()
					}
					wg.Wait()
					var newest int64
					for _, a := range adm {
						newest = max(newest, a.eff)
					}
					// The peek below is clamped to the start of the newest
					// sub-window, where the model recounts the admissions.
					ref := newModel(cfg)
					k := &modelKey{}
					for _, a := range adm {
						k.log = append(k.log, modelEvent{t: a.eff * w, n: a.n})
					}
					d := e.AllowAt("k", 0, time.Unix(0, 0)) // clamped to (newest, 0)
					require.Equal(t, ref.remaining(k, newest*w, L), d.Remaining, "round %d: Remaining after the burst", round)
					fill := int64(0)
					for e.AllowAt("k", 1, time.Unix(0, 0)).Allowed {
						fill++
					}
					require.Equal(t, d.Remaining, fill, "round %d: sequential fill", round)
					e.Close()
				}
			})
		}
	}
}
