package engine_test

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// On a frozen clock, goroutines racing on one key admit exactly Burst
// units between them: one CAS per decision, no unit lost or doubled, and
// no false denial (a failed CAS decides again).
func TestTokenBucketFrozenClockAdmitsExactlyBurst(t *testing.T) {
	for _, c := range tbConfigs {
		e := newBucket(t, c.limit, c.window, c.burst)
		burst := e.Config().Burst
		var admitted atomic.Int64
		var wg sync.WaitGroup
		g := 2 * runtime.GOMAXPROCS(0)
		for i := range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 200; j++ {
					n := int64(1 + (i+j)%2)
					if e.AllowAt("k", n, t0).Allowed {
						admitted.Add(n)
					}
				}
			}()
		}
		wg.Wait()
		// Units of 2 may leave one unit over: at most Burst, at least
		// Burst − 1, and exactly Burst with units of 1 (below).
		require.LessOrEqual(t, admitted.Load(), burst)
		require.GreaterOrEqual(t, admitted.Load(), burst-1)
		for e.AllowAt("k", 1, t0).Allowed {
			admitted.Add(1)
		}
		require.Equal(t, burst, admitted.Load())
	}
}

// With time moving, goroutines deciding at a shared clock never admit more
// than Burst + ⌊D·Limit/Window⌋ units in any interval of length D (checked
// over every pair of admissions). The clock moves only between decisions
// (a goroutine advances it under mu's write lock; decisions run under its
// read lock, racing each other's CAS at the clock's time): a now that went
// stale while others moved the key into a new state (a move, config 7)
// would be decided at that state's base, later than the now the test
// records, as every algorithm decides an older now at the key's newest
// time (docs/semantics.md), and the recorded times would not be the
// decisions' own.
func TestTokenBucketAdvancingClockWithinBound(t *testing.T) {
	for ci, c := range tbConfigs {
		e := newBucket(t, c.limit, c.window, c.burst)
		burst := e.Config().Burst
		tick := max(int64(c.window)/c.limit, 1)
		var clock atomic.Int64
		clock.Store(t0.UnixNano())
		require.True(t, e.AllowAt("k", 0, t0).Allowed)
		e.AllowAt("k", 1, t0) // create the key at t0: its base
		var mu sync.Mutex
		var phase sync.RWMutex
		times := []int64{t0.UnixNano()}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(i)))
				var mine []int64
				for range 1500 {
					phase.Lock()
					clock.Add(rng.Int64N(tick/2 + 1))
					phase.Unlock()
					phase.RLock()
					now := clock.Load()
					if e.AllowAt("k", 1, time.Unix(0, now)).Allowed {
						mine = append(mine, now)
					}
					phase.RUnlock()
				}
				mu.Lock()
				times = append(times, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		slices.Sort(times)
		for i := range times {
			for j := i; j < len(times); j++ {
				// ⌊D·Limit/Window⌋, exactly (big.Int).
				if allowed := burst + floorMulDiv(times[j]-times[i], c.limit, int64(c.window)); int64(j-i+1) > allowed {
					t.Fatalf("config %d: %d units in [%d, %d], the bound is %d", ci, j-i+1, times[i], times[j], allowed)
				}
			}
		}
	}
}

func floorMulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64 / 2 // no count reaches it
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, math.MaxInt64/2))
}

// A key is reclaimed once its bucket is full again (idle for its refill
// time), never before, and a reclaimed key starts full; MaxKeys counts
// bucket keys as any other.
func TestTokenBucketEvictionAndMaxKeys(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: 5, Clock: clk, MaxKeys: 2, SweepInterval: time.Hour})
	require.True(t, e.AllowN("a", 5).Allowed)
	require.True(t, e.AllowN("b", 1).Allowed)
	d := e.AllowN("c", 1)
	require.False(t, d.Allowed)
	require.Equal(t, engine.ReasonKeysFull, d.Reason())
	clk.Advance(500*time.Millisecond - 1) // a: 1 ns short of full
	require.Equal(t, 1, e.Sweep(), "b is full again, a is not")
	require.Equal(t, int64(1), e.Len())
	require.Equal(t, int64(4), e.AllowN("a", 0).Remaining)
	clk.Advance(1)
	require.Equal(t, 1, e.Sweep())
	require.True(t, e.AllowN("c", 1).Allowed)
	require.Equal(t, int64(5), e.AllowN("a", 5).Remaining+5, "a starts full")
}

// AllowAll is all or nothing across bucket keys: on a refusal the earlier
// requests' units, the newest bookings of their keys, are given back.
func TestTokenBucketAllowAll(t *testing.T) {
	e := newBucket(t, 10, time.Second, 5)
	f := newBucket(t, 10, time.Second, 2)
	i, d := engine.AllowAll(t0, engine.Request{Engine: e, Key: "k", N: 4}, engine.Request{Engine: f, Key: "k", N: 3})
	require.Equal(t, 1, i)
	require.False(t, d.Allowed)
	require.Equal(t, engine.Never, d.RetryAfter)
	require.Equal(t, int64(5), e.AllowAt("k", 0, t0).Remaining, "given back")
	i, _ = engine.AllowAll(t0, engine.Request{Engine: e, Key: "k", N: 4}, engine.Request{Engine: f, Key: "k", N: 2})
	require.Equal(t, -1, i)
	require.Equal(t, int64(1), e.AllowAt("k", 0, t0).Remaining)
	require.Equal(t, int64(0), f.AllowAt("k", 0, t0).Remaining)
}

// Settle returns unused units while the reservation is the newest booking,
// and charges a larger cost as a debt: later requests wait it out, exactly.
func TestTokenBucketSettle(t *testing.T) {
	e := newBucket(t, 10, time.Second, 5)
	r := e.ReserveAt("k", 4, t0)
	d, err := r.SettleAt(1, t0)
	require.NoError(t, err)
	require.Equal(t, int64(4), d.Remaining)
	r = e.ReserveAt("k", 4, t0)
	d, err = r.SettleAt(8, t0) // 4 more as a debt: the bucket owes 4
	require.NoError(t, err)
	require.Equal(t, int64(0), d.Remaining)
	require.Equal(t, 500*time.Millisecond, d.RetryAfter)
	_, err = e.ChargeAt("k", 2, t0) // would owe 6 > Burst: refused
	require.ErrorIs(t, err, engine.ErrDebtFull)
	_, err = e.ChargeAt("k", 1, t0) // owes 5 = Burst: the most
	require.NoError(t, err)
	require.Equal(t, 600*time.Millisecond, e.AllowAt("k", 1, t0).RetryAfter)
	require.False(t, e.AllowAt("k", 1, t0.Add(600*time.Millisecond-1)).Allowed)
}
