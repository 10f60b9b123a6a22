package ringslot

import (
	"math"
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
	// last + cache words + [limit] + N+1 slots, then the key's length byte
	// and bytes, rounded up to whole cache lines.
	sliding := NewGeometry(sec/10, 10, true, false) // 14 words: 112 bytes
	require.Equal(t, 128, sliding.Bytes(0))
	require.Equal(t, 128, sliding.Bytes(15), "keys up to 15 bytes fit the second line")
	require.Equal(t, 192, sliding.Bytes(16))
	require.Equal(t, 192, sliding.Bytes(79))
	require.Equal(t, 256, sliding.Bytes(80))
	require.Equal(t, 128, NewGeometry(sec/10, 10, true, true).Bytes(7), "per-key limit: 15 words")
	require.Equal(t, 192, NewGeometry(sec/10, 10, true, true).Bytes(8))
	require.Equal(t, 128, NewGeometry(sec/10, 10, false, false).Bytes(23), "strict: one cache word, 13 words")
	require.Equal(t, 64, NewGeometry(sec, 0, false, false).Bytes(47), "fixed: last + one slot")
	require.Equal(t, 128, NewGeometry(sec, 0, false, false).Bytes(48))
	// A key of 128 bytes or more takes a two-byte length.
	require.Equal(t, 256, sliding.Bytes(127))
	require.Equal(t, 256, sliding.Bytes(128)) // 112 + 2 + 128 = 242
	require.Equal(t, 256, sliding.Bytes(142)) // 112 + 2 + 142 = 256
	require.Equal(t, 320, sliding.Bytes(143))
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
	for i := 0; i < scaled(25_000, 200_000); i++ {
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

// fits never wraps a caller's n: with full above the limit (a lowered
// limit) or at it, and n near either edge of int64, it refuses, as exact
// big-integer arithmetic does. Before, limit − full − n wrapped for
// n = math.MaxInt64 and math.MaxInt64 − 1 once full exceeded limit, and
// fits admitted them.
func TestFitsNeverWrapsACallersN(t *testing.T) {
	ns := []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 7, math.MinInt64, math.MinInt64 + 1, -1, 1 << 62}
	for _, weighted := range []bool{true, false} {
		g := NewGeometry(sec/10, 10, weighted, false)
		for _, c := range []struct{ full, old, limit int64 }{{5, 0, 2}, {5, 3, 2}, {2, 0, 2}, {0, 0, 1}, {pack.MaxCount, 0, pack.MaxCount}, {10 * pack.MaxCount, pack.MaxCount, 1}} {
			for _, n := range ns {
				want := n >= 0 && new(big.Int).Add(big.NewInt(c.full+c.old), big.NewInt(n)).Cmp(big.NewInt(c.limit)) <= 0
				require.Equal(t, want, g.fits(c.full, c.old, n, c.limit, 0), "weighted=%v %+v n=%d", weighted, c, n)
			}
		}
	}
}

// Peek of a cost near math.MaxInt64 refuses it with Never on every
// algorithm, on a key holding one unit and on a key whose limit was lowered
// below what it holds. Before, the log's size + n wrapped on the first, and
// every counter ring's limit − full − n on the second: Peek said Allowed.
func TestPeekRefusesCostsNearTheInt64Edge(t *testing.T) {
	for name, c := range limitGeometries() {
		t.Run(name, func(t *testing.T) {
			g := c.g
			one := g.New(t0, 10, "one")
			require.True(t, g.Acquire(one, t0, 1, 10).Allowed)
			over := g.New(t0, 10, "over")
			require.True(t, g.Acquire(over, t0, 5, 10).Allowed)
			require.True(t, g.SetLimit(over, 2))
			for _, n := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 9} {
				require.Equal(t, Result{Remaining: 9, RetryAfter: Never, Epoch: g.EpochOf(t0)}, g.Peek(one, t0, n, 10), "holding 1, n=%d", n)
				require.Equal(t, Result{Remaining: 0, RetryAfter: Never, Epoch: g.EpochOf(t0)}, g.Peek(over, t0, n, 2), "lowered, n=%d", n)
			}
		})
	}
}

func TestRemainingIsFloorOfRoom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < scaled(15_000, 100_000); i++ {
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
		r := g.New(t0, 0, "k")
		const limit = 5000
		require.Equal(t, int64(limit), burstAdmitted(g, r, t0+sec/20, limit))
		res := g.Peek(r, t0+sec/20, 0, limit)
		require.Equal(t, Result{Verdict: Verdict{Allowed: true}}, strip(res))
	}
}

func TestRetireOnlyWhenIdle(t *testing.T) {
	w := sec / 10
	for _, tc := range []struct {
		name  string
		g     *Geometry
		keep  int64 // the longest idle gap after a request at the end of its sub-window that keeps the ring
		width int64
	}{
		{"sliding", NewGeometry(w, 10, true, false), sec + w, w},
		{"strict", NewGeometry(w, 10, false, false), sec + w, w},
		{"fixed", NewGeometry(sec, 0, false, false), 2 * sec, sec},
	} {
		g := tc.g
		for _, at := range []int64{0, 1, tc.width / 2, tc.width - 1} { // offsets of the request in its sub-window
			r := g.New(t0, 0, "k")
			s := t0 + at
			require.True(t, g.Acquire(r, s, 3, 10).Allowed)
			// Idle for up to Window plus one sub-window: kept, whatever
			// the request's offset. Retired once the gap is W + 2w.
			require.False(t, g.Retire(r, s+tc.keep), "%s: idle %v after offset %d", tc.name, tc.keep, at)
			require.False(t, g.Retired(r))
			require.True(t, g.Retire(r, s+tc.keep+tc.width), "%s: idle %v", tc.name, tc.keep+tc.width)
			require.True(t, g.Retired(r))
			// Retired where its last count left the window: N+1 epochs
			// after the request's, on the key's own timeline.
			e, _ := g.split(s)
			require.Equal(t, (e+g.slots)*g.width, g.RetiredAt(r), "retired where its counts have left the window")
			require.True(t, g.Acquire(r, t0+5*sec, 1, 10).Dead)
			require.True(t, g.Peek(r, t0+5*sec, 0, 10).Dead)
		}
	}
}

// strip drops the effective epoch, for comparisons of the other fields.
func strip(r Result) Result {
	r.Epoch = 0
	return r
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

// TestNewest: the start of the newest sub-window (a log: the newest time),
// moved by decisions and Touch, never back, and −1 once retired.
func TestNewest(t *testing.T) {
	g := NewGeometry(sec/10, 10, true, false)
	r := g.New(t0+250*sec/1000, 5, "k")
	require.Equal(t, t0+200*sec/1000, g.Newest(r))
	g.Acquire(r, t0+730*sec/1000, 1, 5)
	require.Equal(t, t0+700*sec/1000, g.Newest(r))
	g.Acquire(r, t0+100*sec/1000, 1, 5) // older: clamped, nothing moves back
	require.Equal(t, t0+700*sec/1000, g.Newest(r))
	g.Touch(r, t0+2*sec+50*sec/1000)
	require.Equal(t, t0+2*sec, g.Newest(r))
	require.True(t, g.Retire(r, t0+10*sec))
	require.Equal(t, int64(-1), g.Newest(r))

	l := NewLog(sec)
	lr := l.New(t0+123, 5, "k")
	require.Equal(t, t0+123, l.Newest(lr))
	l.Acquire(lr, t0+456, 1, 5)
	require.Equal(t, t0+456, l.Newest(lr))
	require.True(t, l.Retire(lr, t0+10*sec))
	require.Equal(t, int64(-1), l.Newest(lr))
}
