package engine

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Writers race on a few keys whose home-slab slots are shared (a forced
// hash mask) while churn keys fill slab after slab (each generation
// change races the lookups), two loops sweep, and some keys are Reset.
// The timeline jumps forward in rounds (sometimes past idleness, so keys
// are reclaimed and recreated under the writers) and sometimes back.
//
// Verdicts: every decision carries its own key's limit (KeyLimit differs
// per key, so a ring of another key would show another limit); for the
// keys never Reset, the units recorded in any window (Reservation.At,
// minus successful Cancels) never pass the limit (Strict: any N+1
// sub-windows; Fixed: one window; SlidingLog: any (t−W, t]); and once
// the writers stop each round, every key's Remaining is exactly its
// limit minus the units the model holds in its window, and a Reset key's
// is its whole limit.
func TestSlabRaceNeverSharesOrRevivesACount(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindowStrict, FixedWindow, SlidingLog, SlidingWindow} {
		for _, mask := range []uint64{0, 0xFFFF_FFFF, 0x3 | 0x3<<32} {
			t.Run(fmt.Sprintf("%s/mask=%#x", alg, mask), func(t *testing.T) { slabRace(t, alg, mask) })
		}
	}
}

func slabRace(t *testing.T, alg Algorithm, mask uint64) {
	const (
		keys    = 10
		resets  = 3 // keys 0 … resets−1 are Reset too
		workers = 4
		rounds  = 5
		window  = 200 * time.Millisecond
	)
	limitOf := func(i int) int64 { return 2 + int64(i) }
	name := func(i int) string { return "k" + strconv.Itoa(i) } // 2 or 3 bytes: in the slab
	t0 := time.Unix(1_700_000_000, 0)
	clk := NewManualClock(t0)
	e, err := New(Config{
		Limit: 5, Window: window, SubWindows: 10, Algorithm: alg, Clock: clk, Shards: 1,
		SweepInterval: time.Millisecond,
		KeyLimit: func(k string) int64 {
			if k[0] != 'k' {
				return 1
			}
			i, _ := strconv.Atoi(k[1:])
			return limitOf(i)
		},
	})
	require.NoError(t, err)
	defer e.Close()
	e.tab.ForceHashMask(mask)
	width, span := e.Width(), int64(e.Span())

	var mu sync.Mutex
	recorded := make([][]slabUnit, keys) // under mu
	var bad atomic.Value
	fail := func(s string) { bad.CompareAndSwap(nil, s) }

	rng := rand.New(rand.NewPCG(mask, uint64(alg)))
	at := t0
	churn := 0
	for round := range rounds {
		switch r := rng.IntN(10); {
		case r < 2:
			at = at.Add(3*window + time.Duration(rng.IntN(int(window)))) // every key idle: reclaimed
		case r < 3:
			at = at.Add(-time.Duration(rng.IntN(int(window / 5)))) // backwards
		default:
			at = at.Add(time.Duration(rng.IntN(int(window / 3))))
		}
		clk.Set(at)
		var stop atomic.Bool
		var bg sync.WaitGroup
		for range 2 {
			bg.Add(1)
			go func() {
				defer bg.Done()
				for !stop.Load() {
					e.Sweep()
				}
			}()
		}
		bg.Add(1)
		go func(base int) { // churn: new keys, on the shared slots, filling slabs
			defer bg.Done()
			for j := 0; !stop.Load() && j < 600; j++ {
				e.AllowAt("c"+strconv.Itoa(base+j), 1, at)
			}
		}(churn)
		churn += 600
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				var held []Reservation
				for range 150 {
					i := r.IntN(keys)
					k := name(i)
					now := at.Add(time.Duration(r.IntN(3000)) * time.Microsecond)
					switch op := r.IntN(10); {
					case op < 1 && i < resets:
						e.Reset(k)
					case op < 2 && len(held) > 0:
						res := held[len(held)-1]
						held = held[:len(held)-1]
						if j, _ := strconv.Atoi(res.Key()[1:]); res.Cancel() && j >= resets {
							mu.Lock()
							recorded[j] = append(recorded[j], slabUnit{res.At().UnixNano(), -1})
							mu.Unlock()
						}
					default:
						res := e.ReserveAt(k, 1, now)
						d := res.Decision()
						if d.Limit != limitOf(i) {
							fail(fmt.Sprintf("round %d: key %s decided with limit %d, its own is %d (%+v)", round, k, d.Limit, limitOf(i), d))
						}
						if d.Allowed {
							if i >= resets {
								mu.Lock()
								recorded[i] = append(recorded[i], slabUnit{res.At().UnixNano(), 1})
								mu.Unlock()
							}
							held = append(held, res)
						}
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
		// Quiescent: each key's Remaining is exact.
		for i := range keys {
			k := name(i)
			if i < resets {
				e.Reset(k)
				d := e.AllowAt(k, 0, at)
				require.Equal(t, limitOf(i), d.Remaining, "round %d: key %s after Reset: %+v", round, k, d)
				continue
			}
			d := e.AllowAt(k, 0, at)
			require.Equal(t, limitOf(i), d.Limit, "round %d key %s", round, k)
			if alg == SlidingWindow {
				continue // weighted: no simple exact model here
			}
			held := inWindow(alg, recorded[i], clampNow(alg, recorded[i], at.UnixNano(), width), width, span, int64(window))
			require.Equal(t, max(0, limitOf(i)-held), d.Remaining, "round %d: key %s holds %d units in its window by the model", round, k, held)
		}
	}
	for i := resets; i < keys && alg != SlidingWindow; i++ {
		checkWindows(t, alg, fmt.Sprintf("key k%d", i), recorded[i], limitOf(i), width, span, int64(window))
	}
}

// slabUnit is n units recorded at Unix ns at (n −1: a Cancel).
type slabUnit struct{ at, n int64 }

// clampNow is the time a decision at now is made at: the key's newest
// sub-window's start when now's is older (SlidingLog: its newest time).
func clampNow(alg Algorithm, us []slabUnit, now, width int64) int64 {
	newest := int64(0)
	for _, u := range us {
		newest = max(newest, u.at)
	}
	if alg == SlidingLog {
		return max(now, newest)
	}
	if now/width < newest/width {
		return newest / width * width
	}
	return now
}

// inWindow is the number of units the model holds at now.
func inWindow(alg Algorithm, us []slabUnit, now, width, span, window int64) int64 {
	var c int64
	for _, u := range us {
		if alg == SlidingLog {
			if u.at > now-window && u.at <= now {
				c += u.n
			}
			continue
		}
		if e := u.at / width; e >= now/width-span && e <= now/width {
			c += u.n
		}
	}
	return c
}

func checkWindows(t *testing.T, alg Algorithm, who string, us []slabUnit, limit, width, span, window int64) {
	t.Helper()
	ends := make([]int64, 0, len(us))
	for _, u := range us {
		ends = append(ends, u.at)
		if alg != SlidingLog {
			ends = append(ends, u.at/width*width+span*width)
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
	for _, end := range ends {
		if c := inWindow(alg, us, end, width, span, window); c > limit {
			t.Fatalf("%s: %d units in the window ending at %d, limit %d", who, c, end, limit)
		}
	}
}
