package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A key's ring moves when a request far past its newest one revives it: a
// ring of its own made before the threshold moves into the slab, and a
// ring in a slab that a sweep then drops moves onto the heap. Goroutines
// reviving the same keys at one far instant admit exactly each key's
// limit, and a Reservation held from before the move, cancelled after it,
// gives nothing back to the new ring. Each counter algorithm with a slab.
func TestSlabRevivalMovesRingsAcrossTheThreshold(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) { testRevivalAcrossThreshold(t, alg) })
	}
}

func testRevivalAcrossThreshold(t *testing.T, alg engine.Algorithm) {
	t0 := time.Unix(1_700_000_000, 0)
	const lim = 40
	e, clk := newThresholdEngineOf(t, engine.Config{Limit: lim, Algorithm: alg}, t0)
	limit := func(string) int64 { return lim }
	heap := hotKeys("h", 8)
	for _, k := range heap {
		e.AllowAt(k, 1, t0)
	}
	createKeys(t, e, "f", 0, slabThreshold, t0)
	if e.SlabGen() == 0 {
		t.Fatalf("no slab at %d keys", e.Len())
	}
	slab := hotKeys("s", 8)
	for _, k := range slab {
		e.AllowAt(k, 1, t0)
	}
	keys := append(append([]string{}, heap...), slab...)

	// revive decides on keys from three goroutines at at, far past their
	// newest request, and beside them holds a reservation per key made at
	// at (for the next revival), when admitted, cancels those carried from
	// the last instant, and checks each key's count at at.
	revive := func(at time.Time, carried []engine.Reservation) (next []engine.Reservation) {
		t.Helper()
		clk.Set(at)
		tallies := newTallies(len(keys))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() { defer wg.Done(); decideHot(t, e, keys, tallies, limit, at, w, stop) }()
		}
		for i, k := range keys {
			if r := e.ReserveAt(k, 1, at); r.Decision().Allowed {
				tallies[i].admitted.Add(1)
				next = append(next, r)
			}
		}
		for i := range carried {
			carried[i].Cancel() // its unit is outside every window at at
		}
		close(stop)
		wg.Wait()
		settleHot(t, e, keys, tallies, limit, at)
		return next
	}

	var held []engine.Reservation
	for _, k := range keys {
		held = append(held, e.ReserveAt(k, 1, t0))
	}
	day := 24 * time.Hour
	t1 := t0.Add(100 * day) // far past 2^21 sub-windows: every ring is revived
	held = revive(t1, held)
	if n := e.Sweep(); n < slabThreshold {
		t.Fatalf("the sweep at %v reclaimed %d keys, want at least %d", t1, n, slabThreshold)
	}
	if slabDrops && e.SlabGen() != 0 {
		t.Fatalf("the sweep left %d keys, but the slabs were kept", e.Len())
	}
	revive(t1.Add(100*day), held)
	if got := e.Len(); got != int64(len(keys)) {
		t.Fatalf("Len %d, want %d: a revival counted a key twice or lost one", got, len(keys))
	}
}
