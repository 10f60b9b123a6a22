package ringslot

import (
	"math/big"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/internal/pack"
)

const sec = int64(1e9)

// t0 is on every grid used here.
const t0 = 1_700_000_000 * sec

func TestRingSizeIsPinned(t *testing.T) {
	// last + N+1 slots; + limit with per-key limits. 96 bytes is a Go size
	// class, so N = 10 rings waste nothing.
	require.Equal(t, 96, NewGeometry(sec/10, 10, true, false).Bytes())
	require.Equal(t, 104, NewGeometry(sec/10, 10, true, true).Bytes())
	require.Equal(t, 16, NewGeometry(sec, 0, false, false).Bytes())
}

// ratFits is the exact rational form of the admission test.
func ratFits(full, old, n, limit, w, r int64) bool {
	est := new(big.Rat).Mul(big.NewRat(old, 1), big.NewRat(w-r, w))
	est.Add(est, big.NewRat(full+n, 1))
	return est.Cmp(big.NewRat(limit, 1)) <= 0
}

// The integer test agrees with exact rationals, above all at the boundary
// where a float64 would round either way.
func TestFitsIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		w := 1 + rng.Int64N(1<<rng.IntN(62))
		r := rng.Int64N(w)
		limit := 1 + rng.Int64N(pack.MaxCount)
		old := rng.Int64N(limit + 1)
		// Put full+n right at the threshold: floor(limit − old·(w−r)/w),
		// and one above it.
		hi, lo := mul(old, w-r)
		q := div(hi, lo, w)
		for _, fn := range []int64{limit - q, limit - q - 1, limit - q + 1} {
			if fn < 1 {
				continue
			}
			g := NewGeometry(w, 4, true, false)
			got := g.fits(fn-1, old, 1, limit, r)
			require.Equal(t, ratFits(fn-1, old, 1, limit, w, r), got, "full+n=%d old=%d limit=%d w=%d r=%d", fn, old, limit, w, r)
		}
	}
}

func TestRemainingIsFloorOfRoom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100000; i++ {
		w := 1 + rng.Int64N(1<<rng.IntN(62))
		r := rng.Int64N(w)
		limit := 1 + rng.Int64N(1<<rng.IntN(40))
		old := rng.Int64N(limit + 1)
		full := rng.Int64N(limit + 1)
		g := NewGeometry(w, 4, true, false)
		got := g.remaining(full, old, limit, r)
		// The largest m that still fits, or 0.
		require.GreaterOrEqual(t, got, int64(0))
		if got > 0 {
			require.True(t, ratFits(full, old, got, limit, w, r))
		}
		require.False(t, ratFits(full, old, got+1, limit, w, r) && got+1 <= limit, "remaining %d is not the largest (full=%d old=%d limit=%d w=%d r=%d)", got, full, old, limit, w, r)
	}
}

// burstAdmitted runs 16 goroutines of 1000 single-unit Acquires each on r at
// t, and returns how many were admitted.
func burstAdmitted(g *Geometry, r Ring, t, limit int64) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				if g.Acquire(r, t, 1, limit).Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}

func TestAcquireAtOneInstantFillsExactly(t *testing.T) {
	for _, weighted := range []bool{true, false} {
		g := NewGeometry(sec/10, 10, weighted, false)
		r := g.New(t0, 0)
		const limit = 5000
		require.Equal(t, int64(limit), burstAdmitted(g, r, t0+sec/20, limit))
		res := g.Peek(r, t0+sec/20, 0, limit)
		require.Equal(t, Result{Allowed: true}, res)
	}
}

func TestRetireOnlyWhenIdle(t *testing.T) {
	g := NewGeometry(sec/10, 10, true, false)
	r := g.New(t0, 0)
	require.True(t, g.Acquire(r, t0, 3, 10).Allowed)
	require.False(t, g.Retire(r, t0+sec), "t0's sub-window is still inside at t0+1s")
	require.True(t, g.Retire(r, t0+sec+sec/10))
	require.True(t, g.Retired(r))
	require.True(t, g.Acquire(r, t0+2*sec, 1, 10).Dead)
	require.True(t, g.Peek(r, t0+2*sec, 0, 10).Dead)
}

func TestScrubClearsOnlyCountsNoWindowSees(t *testing.T) {
	g := NewGeometry(sec/10, 10, true, false)
	r := g.New(t0, 0)
	w := sec / 10
	for i := int64(0); i <= 10; i++ {
		require.True(t, g.Acquire(r, t0+i*w, 1, 100).Allowed)
	}
	// Now at epoch e0+15: epochs e0 … e0+4 are out of every window.
	require.True(t, g.Acquire(r, t0+15*w, 1, 100).Allowed)
	g.Scrub(r)
	var counts []int64
	for i := 0; i < 11; i++ {
		counts = append(counts, pack.CountOfWord(r.word(g.hdr+i).Load()))
	}
	e0 := t0 / w
	for i, c := range counts {
		// Slot i holds the newest epoch ≡ i mod 11 that was written.
		var epoch int64
		for x := e0; x <= e0+15; x++ {
			if x%11 == int64(i) && (x <= e0+10 || x == e0+15) {
				epoch = x
			}
		}
		if epoch < e0+5 {
			require.Zero(t, c, "slot %d (epoch e0+%d) should be scrubbed", i, epoch-e0)
		} else {
			require.Equal(t, int64(1), c, "slot %d (epoch e0+%d) is still inside", i, epoch-e0)
		}
	}
	// The estimate is unchanged by scrubbing: 6 units (e0+5 … e0+10) with
	// e0+5 in full at r = 0, plus the one at e0+15.
	require.Equal(t, int64(100-7), g.Peek(r, t0+15*w, 0, 100).Remaining)
}

func mul(a, b int64) (uint64, uint64) {
	x := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	lo := new(big.Int).And(x, new(big.Int).SetUint64(^uint64(0))).Uint64()
	return new(big.Int).Rsh(x, 64).Uint64(), lo
}

func div(hi, lo uint64, d int64) int64 {
	x := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
	x.Or(x, new(big.Int).SetUint64(lo))
	return x.Quo(x, big.NewInt(d)).Int64()
}
