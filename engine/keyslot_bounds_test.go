package engine_test

import (
	"encoding/binary"
	"math/rand/v2"
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
// while another goroutine sweeps without pause and keys idle long enough
// are reclaimed and come back. The keys share the engine's limit, so every
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
	keys := scaled(110_000, 400_000) // over 100k: several slab generations
	if alg != engine.SlidingWindow && !longRun() {
		keys = 25_000 // the same path at a quarter of the time; -long runs them all at 400k
	}
	phases := 40
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
		now += w / 2 // two phases per sub-window: keys idle for 6 of them go
		clk.Set(time.Unix(0, now))
		stop := make(chan struct{})
		var sweeps sync.WaitGroup
		sweeps.Add(1)
		go func() {
			defer sweeps.Done()
			for {
				select {
				case <-stop:
					return
				default:
					e.Sweep()
				}
			}
		}()
		var wg sync.WaitGroup
		for wk := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(p), uint64(wk)))
				tr := traces[wk]
				for range int(perPhase)*10/(3*workers) + 50 { // 3 in 10 make a new key
					var k int64
					switch c := rng.IntN(10); {
					case c < 3:
						k = hot
					case c < 6:
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
		close(stop)
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
	full := span + 1 // Strict: the N+1 sub-windows a window overlaps
	switch alg {
	case engine.SlidingWindow:
		full = span
	case engine.FixedWindow:
		full = 1 // its sub-window is the window
	}
	end := now/w*w + w + w/2 // a sub-window past the last decision: the ring walks its slots
	m := newModel(e.Config())
	checked := 0
	for k, as := range byKey {
		slices.SortFunc(as, func(a, b growthAdmit) int { return int(a.at/w - b.at/w) })
		var sum int64
		lo := 0
		for hi := range as {
			sum += as[hi].n
			for as[lo].at/w <= as[hi].at/w-full {
				sum -= as[lo].n
				lo++
			}
			if sum > limit {
				t.Fatalf("key %d (len %d): %d units admitted in %d sub-windows ending at epoch %d, limit %d: %v",
					k, len(growthKey(int(k))), sum, full, as[hi].at/w, limit, as[lo:hi+1])
			}
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
