package ringslot

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLogSizeIsPinned(t *testing.T) {
	// A 48-byte header, then 8 bytes per unit of capacity, then the key,
	// rounded up to whole cache lines.
	require.Equal(t, 64, NewLog(sec).Bytes(0))
	require.Equal(t, 896, LogBytes(100, 0))  // 848 + 1
	require.Equal(t, 896, LogBytes(100, 47)) // 848 + 1 + 47
	require.Equal(t, 960, LogBytes(100, 48))
	require.True(t, NewLog(sec).IsLog())
	require.False(t, NewGeometry(sec/10, 10, true, false).IsLog())
}

// modelLog is the obvious log: every admitted unit's time, in a slice.
type modelLog struct {
	times  []int64
	newest int64
	win    int64
}

func (m *modelLog) live(t int64) []int64 {
	var in []int64
	for _, s := range m.times {
		if s > t-m.win && s <= t {
			in = append(in, s)
		}
	}
	return in
}

func (m *modelLog) decide(t, n, limit int64, record bool) Result {
	asked := t
	t = max(t, m.newest)
	if record {
		m.newest = t
	}
	in := m.live(t)
	used := int64(len(in))
	if n >= 0 && used+n <= limit { // a negative n (a refund) never fits
		if record {
			for i := int64(0); i < n; i++ {
				m.times = append(m.times, t)
			}
			used += n
		}
		return Result{Verdict: Verdict{Allowed: true}, Remaining: max(0, limit-used), Epoch: t}
	}
	res := Result{Remaining: max(0, limit-used), RetryAfter: Never, Epoch: t}
	if n >= 0 && n <= limit {
		res.RetryAfter = in[used+n-limit-1] + m.win - asked // from the caller's t, not the clamped one
	}
	return res
}

// charge records n units at t whatever the limit, as Charge does.
func (m *modelLog) charge(t, n int64) int64 {
	t = max(t, m.newest)
	m.newest = t
	for i := int64(0); i < n; i++ {
		m.times = append(m.times, t)
	}
	return t
}

// Random traffic against the model, with a capacity equal to the limit so
// that the ring wraps many times, steps back in time, bursts that expire
// many units at once (the binary search), and peeks of every class of n.
func TestLogMatchesModel(t *testing.T) {
	for _, limit := range []int64{1, 2, 7, 37} {
		for seed := uint64(1); seed <= scaled[uint64](3, 8); seed++ {
			rng := rand.New(rand.NewPCG(seed, uint64(limit)))
			const win = 100
			g := NewLog(win)
			now := t0
			r := g.New(now, limit, "k")
			m := &modelLog{newest: now, win: win}
			for i := 0; i < 1500; i++ {
				switch rng.IntN(8) {
				case 0:
					now -= rng.Int64N(50)
				case 1:
					now += win + rng.Int64N(win)
				default:
					now += rng.Int64N(30)
				}
				n := 1 + rng.Int64N(limit)
				if rng.IntN(4) == 0 {
					n = rng.Int64N(limit+3) - 1 // a peek: 0, −1 or above the limit too
					require.Equal(t, m.decide(now, n, limit, false), g.Peek(r, now, n, limit), "seed %d step %d: Peek(t0%+d, %d)", seed, i, now-t0, n)
					continue
				}
				require.Equal(t, m.decide(now, n, limit, true), g.Acquire(r, now, n, limit), "seed %d step %d: Acquire(t0%+d, %d)", seed, i, now-t0, n)
				if rng.IntN(2) == 0 {
					allowed, dead := g.Admit(r, now, 1, limit)
					require.False(t, dead)
					require.Equal(t, m.decide(now, 1, limit, true).Allowed, allowed, "seed %d step %d: Admit", seed, i)
				}
			}
		}
	}
}

func TestLogAcquireAtOneInstantFillsExactly(t *testing.T) {
	g := NewLog(sec)
	const limit = 5000
	r := g.New(t0, limit, "k")
	require.Equal(t, int64(limit), burstAdmitted(g, r, t0+sec/20, limit))
	require.Equal(t, Result{Verdict: Verdict{Allowed: true}}, strip(g.Peek(r, t0+sec/20, 0, limit)))
	require.Equal(t, Result{RetryAfter: sec}, strip(g.Acquire(r, t0+sec/20, 1, limit)))
}

func TestLogRetireOnlyWhenIdle(t *testing.T) {
	g := NewLog(sec)
	r := g.New(t0, 10, "k")
	require.True(t, g.Acquire(r, t0, 3, 10).Allowed)
	require.False(t, g.Retire(r, t0+sec-1), "t0's units are inside until t0+1s")
	require.False(t, g.Retire(r, t0+sec), "idle for exactly Window: kept")
	require.Equal(t, Result{Verdict: Verdict{Allowed: true}, Remaining: 7}, strip(g.Peek(r, t0+sec-1, 0, 10)))
	require.True(t, g.Retire(r, t0+sec+1))
	require.True(t, g.Retired(r))
	require.Equal(t, t0+sec, g.RetiredAt(r), "where its newest unit (t0) left the window")
	require.True(t, g.Retire(r, t0+sec+1), "retired at or before t: a sweep may remove it")
	require.False(t, g.Retire(r, t0+sec-1), "retired after t: not yet")
	require.True(t, g.Retired(r))
	require.True(t, g.Acquire(r, t0+2*sec, 1, 10).Dead)
	require.True(t, g.Peek(r, t0+2*sec, 0, 10).Dead)
	require.False(t, g.SetLimit(r, 5))
}

func TestLogSetLimitAndGrow(t *testing.T) {
	g := NewLog(sec)
	r := g.New(t0, 4, "k")
	// Units 2 … 5 arrive after units 0 and 1 have left: the ring wraps.
	for i := int64(0); i < 6; i++ {
		at := t0 + i
		if i >= 2 {
			at = t0 + sec + i
		}
		require.True(t, g.Acquire(r, at, 1, 4).Allowed, "unit %d", i)
	}
	require.True(t, g.SetLimit(r, 3))
	require.Equal(t, int64(3), g.Limit(r))
	require.False(t, g.SetLimit(r, 5), "above the capacity")

	big, moved := g.Grow(r, 6)
	require.True(t, moved)
	require.True(t, g.Retired(r), "the old ring is retired once moved")
	require.True(t, g.Acquire(r, t0+sec+5, 1, 4).Dead)
	require.Equal(t, int64(6), g.Limit(big))
	// The 4 units (t0+1s+2 … +5) and the newest time moved with the log.
	require.Equal(t, Result{Verdict: Verdict{Allowed: true}, Remaining: 2}, strip(g.Peek(big, 0, 0, 6)))
	require.Equal(t, Result{Verdict: Verdict{Allowed: true}}, strip(g.Acquire(big, t0, 2, 6)))
	// Now +2, +3, +4, +5, +5, +5 past t0+1s: 3 must leave, the 3rd at +4+1s.
	require.Equal(t, Result{RetryAfter: sec - 1}, strip(g.Acquire(big, t0+sec+5, 3, 6)))

	// A ring that was retired when idle is not grown: it is the table's to
	// replace (with its floor) or remove.
	idle := g.New(t0, 2, "k")
	require.True(t, g.Retire(idle, t0+sec+1))
	same, moved := g.Grow(idle, 3)
	require.False(t, moved)
	require.True(t, same == idle)
	require.True(t, g.Retired(idle))
}

// A writer at a new time slips in between Retire's unlocked check (the
// ring looks idle) and its lock: the ring must stay, with the writer's
// unit. Retiring it would lose an admitted unit with the ring.
func TestLogRetireRechecksUnderTheLock(t *testing.T) {
	g := NewLog(sec)
	r := g.New(t0, 10, "k")
	require.True(t, g.Acquire(r, t0, 1, 10).Allowed)
	var writer Result
	testHookRetire = func(Ring) { writer = g.Acquire(r, t0+2*sec, 1, 10) }
	defer func() { testHookRetire = nil }()
	require.False(t, g.Retire(r, t0+2*sec), "idle by t0's unit, not by the writer's")
	require.Equal(t, Result{Verdict: Verdict{Allowed: true}, Remaining: 9}, strip(writer))
	require.False(t, g.Retired(r))
}
