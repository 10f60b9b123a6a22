package engine_test

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/big"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Many goroutines decide one hot key and a key set that the table grows to
// hold from nothing to more than 100k keys (slab generation after slab
// generation), at fixed instants up to half a sub-window behind the clock,
// while another goroutine sweeps the whole table once per phase beside
// them, and keys idle long enough are reclaimed and come back. The keys share the engine's limit, so every
// decision in a key's newest sub-window takes the ring's fast path.
//
// Every growthAdmit is recorded with the epoch it was counted in
// (AllowAtTrace), and afterwards each key's admissions are checked against
// the promises, which hold under any interleaving: SlidingWindowStrict
// never holds more than Limit in the N+1 sub-windows any window overlaps;
// the weighted window never more than Limit in N consecutive sub-windows
// (the last growthAdmit among them counted all the others in full) and so
// below 2·Limit in any window; FixedWindow never more than Limit in one
// window. Then no count was lost or invented: a peek one sub-window past
// the end, where the ring walks its slots, reads exactly the Remaining the
// recorded admissions leave.
func TestConcurrentGrowthKeepsBoundsAndCounts(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) { concurrentGrowth(t, alg) })
	}
}

// growthAdmit is one admitted decision: the key's index, the effective time
// it was counted at (ns), and its units.
type growthAdmit struct {
	key  int32
	at   int64
	n    int64
	hint int64 // the epoch AllowAtTrace reported
}

// growthKey is the key of index i: its 4 bytes little-endian, padded with
// zero bytes to one of the lengths around the slot's sizes (and past them).
func growthKey(i int) string {
	lengths := [...]int{4, 7, 8, 15, 16, 23, 24, 40, 71, 72, 100}
	b := make([]byte, lengths[i%len(lengths)])
	binary.LittleEndian.PutUint32(b, uint32(i))
	return string(b)
}

func concurrentGrowth(t *testing.T, alg engine.Algorithm) {
	const (
		limit   = 8
		workers = 8
		hot     = 0 // key index 0 is the hot key
	)
	keys := scaled(104_000, 400_000) // over 100k: several slab generations
	if alg != engine.SlidingWindow && !longRun() {
		keys = 25_000 // the same path at a quarter of the time; -long runs them all at 400k
	}
	phases := 32
	cfg := engine.Config{Limit: limit, Window: time.Second, SubWindows: 4, Algorithm: alg, SweepInterval: time.Hour}
	clk := engine.NewManualClock(t0)
	cfg.Clock = clk
	e := newEngine(t, cfg)
	w := e.Width()
	span := int64(e.Span())
	now := t0.UnixNano()
	var next atomic.Int64 // keys created so far
	next.Store(1)
	perPhase := int64(keys) / int64(phases)
	traces := make([][]growthAdmit, workers)
	for p := range phases {
		now += w / 2 // two phases per sub-window: keys idle for 6 sub-windows go
		clk.Set(time.Unix(0, now))
		var sweeps sync.WaitGroup
		sweeps.Add(1)
		go func() { // a full pass beside the phase's decisions
			defer sweeps.Done()
			e.Sweep()
		}()
		var wg sync.WaitGroup
		for wk := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(p), uint64(wk)))
				tr := traces[wk]
				for range int(perPhase)*2/workers + 50 { // half of them make a new key
					var k int64
					switch c := rng.IntN(10); {
					case c < 2:
						k = hot
					case c < 7:
						k = next.Add(1) - 1 // a new key
					default:
						k = rng.Int64N(next.Load()) // an existing one, or one swept
					}
					at := now - rng.Int64N(w/2)
					n := 1 + rng.Int64N(3)
					d, ep := e.AllowAtTrace(growthKey(int(k)), n, time.Unix(0, at))
					if d.Allowed {
						eff := at
						if at/w != ep { // clamped to the key's newest, or a fresh ring's start
							eff = ep * w
						}
						tr = append(tr, growthAdmit{key: int32(k), at: eff, n: n, hint: ep})
					}
				}
				traces[wk] = tr
			}()
		}
		wg.Wait()
		sweeps.Wait()
	}
	if got := next.Load(); got < int64(keys) {
		t.Fatalf("only %d keys were created, want %d", got, keys)
	}
	if e.Stats().Evicted == 0 {
		t.Fatal("no key was reclaimed: the test did not churn")
	}
	byKey := map[int32][]growthAdmit{}
	for _, tr := range traces {
		for _, a := range tr {
			byKey[a.key] = append(byKey[a.key], a)
		}
	}
	// The bound: the most units in any span of sub-windows that the
	// algorithm counts in full.
	end := now/w*w + w + w/2 // a sub-window past the last decision: the ring walks its slots
	m := newModel(e.Config())
	checked := 0
	for k, as := range byKey {
		if err := checkAdmitted(alg, span, w, limit, as); err != nil {
			t.Fatalf("key %d (len %d): %v", k, len(growthKey(int(k))), err)
		}
		mk := &modelKey{live: true, newest: as[len(as)-1].at / m.w}
		for _, a := range as {
			mk.log = append(mk.log, modelEvent{t: a.at, n: a.n})
		}
		want := m.remaining(mk, end, limit)
		if d := e.AllowAt(growthKey(int(k)), 0, time.Unix(0, end)); d.Remaining != want {
			t.Fatalf("key %d (len %d): Remaining %d after the run, but its %d admissions leave %d: %v",
				k, len(growthKey(int(k))), d.Remaining, len(as), want, as[max(0, len(as)-12):])
		}
		checked++
	}
	hotUnits := int64(0)
	for _, a := range byKey[hot] {
		hotUnits += a.n
	}
	t.Logf("%d keys created, %d with admissions checked; %d reclaimed; the hot key admitted %d units", next.Load(), checked, e.Stats().Evicted, hotUnits)
}

// Goroutines, more of them than cores, decide one key at times that a
// shared counter moves on with every call, so the key's newest sub-window
// changes every 2048 decisions, under contention: the kernel preempts
// writers anywhere in a decision, and a writer at the next sub-window can
// read the slots while one still at the old sub-window is between its read
// and its add. Demand always exceeds the limit, so an add that a newer
// writer missed and that was kept shows as a window over its bound; every
// kept admission is recorded at the epoch it was counted in, and a peek
// afterwards reads exactly what they leave.
func TestHotKeyAcrossSubWindowBoundaries(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		for _, n := range []int{1, 2, 10} {
			if alg == engine.FixedWindow && n > 1 {
				break // it has no sub-windows
			}
			t.Run(fmt.Sprintf("%s/n%d", alg, n), func(t *testing.T) { hotBoundaries(t, alg, n) })
		}
	}
}

func hotBoundaries(t *testing.T, alg engine.Algorithm, span int) {
	const (
		workers = 8
		perSub  = 2048      // calls per sub-window
		key     = "hot-key" // 7 bytes: the head holds it whole
	)
	// A quarter of the calls fit: the key is at its limit all the time, and
	// room opens through each sub-window (weighted: as the oldest one's share
	// decays) or at its start (Strict, Fixed), for admissions in flight when
	// the next sub-window begins.
	limit := int64(perSub / 4)
	switch alg {
	case engine.SlidingWindow:
		limit *= int64(span)
	case engine.SlidingWindowStrict:
		limit *= int64(span + 1)
	}
	calls := scaled(40_000, 400_000)
	if raceOn && !longRun() {
		calls = 8_000
	}
	window := time.Duration(span) * perSub * 16 // 16 ns per call
	if alg == engine.FixedWindow {
		window = perSub * 16
	}
	// More threads than cores: the kernel then preempts writers at any
	// instruction, inside a decision too, which a sub-window's change can
	// overtake.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * workers))
	e := newEngine(t, engine.Config{Limit: limit, Window: window, SubWindows: span, Algorithm: alg, DisableEviction: true})
	w := e.Width()
	base := t0.UnixNano() / w * w
	var seq atomic.Int64
	traces := make([][]growthAdmit, workers)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tr []growthAdmit
			<-gate
			for range calls {
				at := base + seq.Add(1)*w/perSub
				d, ep := e.AllowAtTrace(key, 1, time.Unix(0, at))
				if d.Allowed {
					eff := at
					if at/w != ep {
						eff = ep * w
					}
					tr = append(tr, growthAdmit{at: eff, n: 1, hint: ep})
				}
			}
			traces[wk] = tr
		}()
	}
	close(gate)
	wg.Wait()
	var as []growthAdmit
	for _, tr := range traces {
		as = append(as, tr...)
	}
	if err := checkAdmitted(alg, int64(span), w, limit, as); err != nil {
		t.Fatal(err)
	}
	m := newModel(e.Config())
	mk := &modelKey{live: true, newest: as[len(as)-1].at / w}
	for _, a := range as {
		mk.log = append(mk.log, modelEvent{t: a.at, n: a.n})
	}
	last := base + seq.Load()*w/perSub
	end := last/w*w + w + w/2
	if want, d := m.remaining(mk, end, limit), e.AllowAt(key, 0, time.Unix(0, end)); d.Remaining != want {
		t.Fatalf("Remaining %d after the run, but its %d admissions leave %d", d.Remaining, len(as), want)
	}
	t.Logf("%d calls over %d sub-windows: %d admitted", workers*calls, (last-base)/w, len(as))
}

// checkAdmitted checks one key's admissions (effective times, units)
// against what every interleaving must keep, in sub-windows of w: no
// more than limit units in the sub-windows the algorithm counts in full
// (Strict: the N+1 a window overlaps; weighted: N; Fixed: its one window).
// For the weighted window it also checks the oldest sub-window's share:
// of the admissions in a sub-window x, the last one to be made counted
// every unit of x and of the N before it (a unit at an older epoch is
// made before last reaches x), so for some admission of x at offset r,
// c[x−N+1 … x] + c[x−N]·(w−r)/w ≤ limit, which the latest r makes the
// weakest. It sorts as.
func checkAdmitted(alg engine.Algorithm, span, w, limit int64, as []growthAdmit) error {
	full := span + 1
	switch alg {
	case engine.SlidingWindow:
		full = span
	case engine.FixedWindow:
		full = 1
	}
	slices.SortFunc(as, func(a, b growthAdmit) int { return cmp.Compare(a.at, b.at) })
	count := map[int64]int64{}  // units per epoch
	latest := map[int64]int64{} // the latest offset of an admission per epoch
	var sum int64
	lo := 0
	for hi := range as {
		x := as[hi].at / w
		count[x] += as[hi].n
		latest[x] = as[hi].at % w
		sum += as[hi].n
		for as[lo].at/w <= x-full {
			sum -= as[lo].n
			lo++
		}
		if sum > limit {
			return fmt.Errorf("%d units admitted in %d sub-windows ending at epoch %d, limit %d: %v", sum, full, x, limit, as[max(lo, hi-20):hi+1])
		}
	}
	if alg != engine.SlidingWindow {
		return nil
	}
	for x, r := range latest {
		var c int64
		for y := x - span + 1; y <= x; y++ {
			c += count[y]
		}
		// c + old·(w−r)/w ≤ limit, exactly: c·w + old·(w−r) ≤ limit·w.
		lhs := new(big.Int).Mul(big.NewInt(c), big.NewInt(w))
		lhs.Add(lhs, new(big.Int).Mul(big.NewInt(count[x-span]), big.NewInt(w-r)))
		if lhs.Cmp(new(big.Int).Mul(big.NewInt(limit), big.NewInt(w))) > 0 {
			return fmt.Errorf("sub-window %d: %d units in full and %d in the oldest, weighted at the latest admission's offset %d of %d ns, pass the limit %d",
				x, c, count[x-span], r, w, limit)
		}
	}
	return nil
}
