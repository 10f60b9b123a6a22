package engine

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Reset races the writers of its own key while churn keys fill slab after
// slab around it (the key's slots shared with them by a forced hash mask)
// and two loops sweep. Each Reset that finds the key retires its ring and
// the next writer starts a new one, in the newest slab or on the heap. With
// Limit 1 and every request of a round at one instant, each incarnation of
// the key admits at most one unit: so in a round the key admits at most one
// unit more than the Resets that reported true. More means a writer was
// admitted on a ring already retired (a retired ring come back to life) or
// on another key's count.
func TestResetRacingSlabLookupsAdmitsOncePerIncarnation(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingWindowStrict, FixedWindow, SlidingLog} {
		for _, mask := range []uint64{^uint64(0), 0, 0xFFFF_FFFF} {
			t.Run(fmt.Sprintf("%s/mask=%#x", alg, mask), func(t *testing.T) { resetRace(t, alg, mask) })
		}
	}
}

func resetRace(t *testing.T, alg Algorithm, mask uint64) {
	const (
		keys    = 3
		workers = 3
		rounds  = 6
		window  = 200 * time.Millisecond
	)
	t0 := time.Unix(1_700_000_000, 0)
	clk := NewManualClock(t0)
	e, err := New(Config{Limit: 1, Window: window, Algorithm: alg, Clock: clk, Shards: 1, SweepInterval: time.Millisecond})
	require.NoError(t, err)
	defer e.Close()
	e.tab.ForceHashMask(mask)
	name := func(i int) string { return "r" + strconv.Itoa(i) }
	churn := 0
	var total [2]int64
	defer func() { t.Logf("admitted %d, resets %d", total[0], total[1]) }()
	for round := range rounds {
		at := t0.Add(time.Duration(round) * 3 * window)
		clk.Set(at)
		var admitted, resets [keys]atomic.Int64
		var stop atomic.Bool
		var bg sync.WaitGroup
		bg.Add(3)
		go func() {
			defer bg.Done()
			for !stop.Load() {
				e.Sweep()
			}
		}()
		go func(base int) {
			defer bg.Done()
			for j := 0; !stop.Load() && j < 2000; j++ {
				e.AllowAt("c"+strconv.Itoa(base+j), 1, at)
			}
		}(churn)
		churn += 2000
		go func() {
			defer bg.Done()
			var seen [keys]int64 // reset a key once it has admitted, so that resets ≈ admissions and the bound is tight
			for j := 0; !stop.Load(); j++ {
				i := j % keys
				if a := admitted[i].Load(); a > seen[i] {
					seen[i] = a
					if e.Reset(name(i)) {
						resets[i].Add(1)
					}
				}
			}
		}()
		var wg sync.WaitGroup
		var bad atomic.Value
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 300 {
					i := (j + w) % keys
					d := e.AllowAt(name(i), 1, at)
					if d.Limit != 1 {
						bad.CompareAndSwap(nil, fmt.Sprintf("key %s decided with limit %d", name(i), d.Limit))
					}
					if d.Allowed {
						admitted[i].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		stop.Store(true)
		bg.Wait()
		if s := bad.Load(); s != nil {
			t.Fatal(s)
		}
		for i := range keys {
			a, r := admitted[i].Load(), resets[i].Load()
			total[0] += a
			total[1] += r
			require.LessOrEqual(t, a, r+1, "round %d key %s: %d units admitted with %d Resets (at most one per incarnation)", round, name(i), a, r)
		}
	}
}
