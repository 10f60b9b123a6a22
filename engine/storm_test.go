package engine_test

import (
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

type stormRes struct {
	r     engine.Reservation
	wins  atomic.Int32
	owner int
}

// Concurrent reserve/cancel storms on one key, time moving across
// sub-window boundaries (and sometimes backwards), cancels of old and new
// reservations by any goroutine (several at once on one), a sweeper at the
// current time. Check, once successful cancels are subtracted: strict ≤ L
// in every N+1 sub-windows, fixed ≤ L per window, log ≤ L in every
// (t−W, t].
func TestStormOfRandomOperations(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, N := range []int{1, 3} {
			if alg != engine.SlidingWindowStrict && alg != engine.SlidingWindow && N != 1 {
				continue
			}
			for round := 0; round < scaled(1, 3); round++ {
				runStorm(t, alg, N, uint64(round), false)
				runStorm(t, alg, N, uint64(round), true)
			}
		}
	}
}

func runStorm(t *testing.T, alg engine.Algorithm, N int, seed uint64, grow bool) {
	const L = 7
	w := int64(1000)
	W := w * int64(N)
	if alg == engine.FixedWindow || alg == engine.SlidingLog {
		W = 3000
	}
	base := t0.UnixNano()
	clk := engine.NewManualClock(time.Unix(0, base))
	e := newEngineNoCloseCheck(t, engine.Config{Limit: L, Window: time.Duration(W), SubWindows: N, Algorithm: alg, Clock: clk, SweepInterval: time.Millisecond, PerKeyLimits: true})
	var now atomic.Int64
	now.Store(base)
	var mu sync.Mutex
	all := make([]*stormRes, 0, 1<<16)
	const G = 6
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < G; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := 0; i < 4000; i++ {
				switch rng.IntN(8) {
				case 0:
					now.Add(rng.Int64N(w / 3))
				case 1, 2, 3:
					tt := now.Load() - rng.Int64N(w/2)
					s := &stormRes{owner: g}
					s.r = e.ReserveAt("k", 1+rng.Int64N(3), time.Unix(0, tt))
					if s.r.Units() > 0 {
						mu.Lock()
						all = append(all, s)
						mu.Unlock()
						if rng.IntN(3) == 0 {
							if s.r.Cancel() {
								s.wins.Add(1)
							}
						}
					}
				default:
					mu.Lock()
					var s *stormRes
					if len(all) > 0 {
						// mostly recent ones, sometimes old
						k := len(all) - 1 - rng.IntN(min(len(all), 40))
						if rng.IntN(5) == 0 {
							k = rng.IntN(len(all))
						}
						s = all[k]
					}
					mu.Unlock()
					if s != nil && s.r.Cancel() {
						s.wins.Add(1)
					}
				}
			}
		}(g)
	}
	lim := int64(L)
	if grow {
		var gwg sync.WaitGroup
		gwg.Add(1)
		go func() {
			defer gwg.Done()
			for l := int64(L + 1); l <= 300; l += 7 {
				time.Sleep(200 * time.Microsecond)
				if err := e.SetLimit("k", l); err != nil {
					t.Error(err)
				}
				lim = l
			}
		}()
		defer gwg.Wait()
		wg.Wait()
		gwg.Wait()
	}
	var sw sync.WaitGroup
	sw.Add(1)
	go func() {
		defer sw.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			clk.Set(time.Unix(0, now.Load()-W))
			e.Sweep()
			time.Sleep(50 * time.Microsecond)
		}
	}()
	wg.Wait()
	close(stop)
	sw.Wait()

	// Check.
	live := map[int64]int64{}
	var admitted, cancelled int64
	for _, s := range all {
		if s.wins.Load() > 1 {
			t.Fatalf("a reservation was cancelled %d times", s.wins.Load())
		}
		admitted += s.r.Units()
		if s.wins.Load() == 1 {
			cancelled += s.r.Units()
			continue
		}
		at := s.r.At().UnixNano()
		if alg != engine.SlidingLog {
			if at%w != 0 && alg != engine.FixedWindow {
				t.Fatalf("At %d not a sub-window start", at)
			}
			at /= w
			if alg == engine.FixedWindow {
				at = s.r.At().UnixNano() / W
			}
		}
		live[at] += s.r.Units()
	}
	if k, sum, over := overfullWindow(alg, int64(W), N, live, lim); over && alg != engine.SlidingWindow {
		t.Fatalf("%v N=%d seed=%d: window ending at %d holds %d > %d live units (admitted %d, cancelled %d)", alg, N, seed, k, sum, lim, admitted, cancelled)
	}
	// Exact accounting at the final time: no lost or doubled cancel, no
	// residue of failed attempts.
	T := now.Load()
	ref := newModel(engine.Config{Limit: lim, Window: time.Duration(W), SubWindows: N, Algorithm: alg})
	k := &modelKey{}
	for x, n := range live { // live is per epoch (SlidingLog: per ns)
		k.log = append(k.log, modelEvent{t: x * ref.w, n: n})
	}
	inWin := ref.count(k, T)
	want := ref.remaining(k, T, lim)
	if rem := e.AllowAt("k", 0, time.Unix(0, T)).Remaining; rem != want {
		t.Fatalf("%v N=%d seed=%d: final Remaining %d, live units in window %d (limit %d)", alg, N, seed, rem, inWin, lim)
	}
	t.Logf("%v N=%d: admitted %d, cancelled %d, %d keys", alg, N, admitted, cancelled, len(live))
}

// Real clock, tiny window, the background sweeper reclaiming the key
// whenever it goes idle, Reserve/Cancel from several goroutines with
// pauses. Strict/fixed/log bounds over the live units (by At()).
func TestRealClockStormWithSweeper(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		const L = 5
		N := 2
		W := 2 * time.Millisecond
		e := newEngineNoCloseCheck(t, engine.Config{Limit: L, Window: W, SubWindows: N, Algorithm: alg, SweepInterval: time.Millisecond, Shards: 1})
		type ent struct {
			r  engine.Reservation
			ok bool
		}
		var mu sync.Mutex
		var all []*ent
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 5))
				var mine []*ent
				for i := 0; i < 3000; i++ {
					if rng.IntN(60) == 0 {
						time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
					}
					if rng.IntN(2) == 0 || len(mine) == 0 {
						en := &ent{}
						en.r = e.Reserve("k", 1+rng.Int64N(2))
						if en.r.Units() > 0 {
							mine = append(mine, en)
						}
					} else {
						en := mine[len(mine)-1-rng.IntN(min(len(mine), 5))]
						if en.r.Cancel() {
							en.ok = true
						}
					}
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}(g)
		}
		wg.Wait()
		live := map[int64]int64{}
		w := int64(W) / int64(N)
		for _, en := range all {
			if en.ok {
				continue
			}
			at := en.r.At().UnixNano()
			switch alg {
			case engine.SlidingWindowStrict:
				at /= w
			case engine.FixedWindow:
				at /= int64(W)
			}
			live[at] += en.r.Units()
		}
		if k, sum, over := overfullWindow(alg, int64(W), N, live, L); over {
			t.Fatalf("%v: window ending at %d holds %d live units > %d", alg, k, sum, L)
		}
		t.Logf("%v: %d reservations, evicted %d", alg, len(all), e.Stats().Evicted)
	}
}

// overfullWindow finds the first window that holds more than lim of the
// live units, given per effective time: per sub-window for the counters
// (whose window is the N+1 sub-windows ending at one), per window for
// FixedWindow, per ns for SlidingLog (window: W ns). It returns the key
// the window ends at and its sum.
func overfullWindow(alg engine.Algorithm, W int64, N int, live map[int64]int64, lim int64) (end, sum int64, over bool) {
	keys := make([]int64, 0, len(live))
	for k := range live {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for i, k := range keys {
		sum = 0
		for j := i; j >= 0; j-- {
			x := keys[j]
			var in bool
			switch alg {
			case engine.SlidingLog:
				in = x > k-W
			case engine.FixedWindow:
				in = x == k
			default:
				in = x >= k-int64(N)
			}
			if !in {
				break
			}
			sum += live[x]
		}
		if sum > lim {
			return k, sum, true
		}
	}
	return 0, 0, false
}
