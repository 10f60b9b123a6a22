package ringslot

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/internal/pack"
)

// chargeGeometries are the counter rings Charge is tested on, per-key
// limits included (Charge ignores the limit word).
func chargeGeometries() map[string]*Geometry {
	return map[string]*Geometry{
		"sliding":        NewGeometry(sec/10, 10, true, false),
		"strict":         NewGeometry(sec/10, 10, false, false),
		"fixed":          NewGeometry(sec, 0, false, false),
		"strict-per-key": NewGeometry(sec/10, 3, false, true),
	}
}

// requireRetryExact checks that a one-unit request at t is refused with a
// RetryAfter R after which, and not one nanosecond before, it fits.
func requireRetryExact(t *testing.T, g *Geometry, r Ring, at, limit int64) int64 {
	t.Helper()
	d := g.Peek(r, at, 1, limit)
	require.False(t, d.Allowed)
	R := d.RetryAfter
	require.Greater(t, R, int64(0))
	require.NotEqual(t, int64(Never), R)
	require.False(t, g.Peek(r, at+R-1, 1, limit).Allowed, "fits 1 ns before RetryAfter")
	require.True(t, g.Peek(r, at+R, 1, limit).Allowed, "does not fit at RetryAfter")
	return R
}

// A charge is recorded past the limit, where an admission at t would be,
// and refuses every request until its sub-window has left the window, as
// many units admitted there would; RetryAfter counts it exactly.
func TestChargeRecordsPastTheLimit(t *testing.T) {
	for name, g := range chargeGeometries() {
		t.Run(name, func(t *testing.T) {
			w := g.Width()
			r := g.New(t0, 10, "k")
			x := t0 / w
			require.True(t, g.Acquire(r, x*w+w/2, 4, 10).Allowed)
			c := g.Charge(r, x*w+w/2, 20, 0)
			require.Equal(t, Charged{Epoch: x}, c)
			require.Equal(t, int64(0), g.Peek(r, x*w+w/2, 0, 10).Remaining)
			require.False(t, g.Acquire(r, x*w+w/2, 1, 10).Allowed, "no admission over a debt")
			R := requireRetryExact(t, g, r, x*w+w/2, 10)
			// Nothing else is in the window: the wait is the debt's.
			require.LessOrEqual(t, x*w+w/2+R, (x+g.Span()+1)*w, "a debt leaves with its sub-window")
			if !g.weighted {
				require.Equal(t, (x+g.Span()+1)*w, x*w+w/2+R, "strict and fixed: at the sub-window's end")
			}
			res := g.Acquire(r, x*w+w/2+R, 10, 10)
			require.True(t, res.Allowed || g.weighted, "%+v", res) // weighted still weighs part of the debt
		})
	}
}

// A time older than the key's newest epoch is charged there: time never
// runs backwards for a key.
func TestChargeClampsToTheNewestEpoch(t *testing.T) {
	for name, g := range chargeGeometries() {
		w := g.Width()
		r := g.New(t0, 10, "k")
		x := t0 / w
		require.True(t, g.Acquire(r, (x+3)*w, 1, 10).Allowed, name)
		require.Equal(t, Charged{Epoch: x + 3}, g.Charge(r, x*w, 2, 0), name)
		require.Equal(t, int64(7), g.Peek(r, (x+3)*w, 0, 10).Remaining, name)
	}
}

// Counts never carry into the tag: a charge that would take the slot past
// MaxCount records nothing and says Full; one that fits exactly is
// recorded. A slot of another (older) epoch is reset by the charge.
func TestChargeNeverCarriesIntoTheTag(t *testing.T) {
	g := NewGeometry(sec/10, 2, false, false)
	r := g.New(t0, pack.MaxCount, "k")
	w := g.Width()
	x := t0 / w
	require.True(t, g.Acquire(r, x*w, pack.MaxCount-2, pack.MaxCount).Allowed)
	require.Equal(t, Charged{Epoch: x, Full: true}, g.Charge(r, x*w, 3, 0))
	require.Equal(t, int64(2), g.Peek(r, x*w, 0, pack.MaxCount).Remaining, "nothing recorded")
	require.Equal(t, Charged{Epoch: x}, g.Charge(r, x*w, 2, 0))
	require.Equal(t, pack.Word(pack.TagOf(x), pack.MaxCount), r.word(g.hdr+g.index(x)).Load())
	// The next sub-window's slot is fresh: a full charge fits there, and
	// the window sums 2·MaxCount without overflow.
	require.Equal(t, Charged{Epoch: x + 1}, g.Charge(r, (x+1)*w, pack.MaxCount, 0))
	d := g.Acquire(r, (x+1)*w, 1, pack.MaxCount)
	require.False(t, d.Allowed)
	require.Equal(t, int64(0), d.Remaining)
	require.Equal(t, 3*w, d.RetryAfter, "both sub-windows must leave: x+1 leaves at x+4")
	// Three sub-windows on, slot x's index is reused by x+3: a reset.
	require.Equal(t, Charged{Epoch: x + 3}, g.Charge(r, (x+3)*w, 5, 0))
	require.Equal(t, pack.Word(pack.TagOf(x+3), 5), r.word(g.hdr+g.index(x+3)).Load())
}

// A retired ring records nothing (the caller reloads the key's ring), and
// a charge 2^21 sub-windows past the key's newest retires it, as an
// admission there would.
func TestChargeOnARetiredRing(t *testing.T) {
	for name, g := range chargeGeometries() {
		w := g.Width()
		r := g.New(t0, 10, "k")
		x := t0 / w
		require.True(t, g.Retire(r, (x+100)*w), name)
		require.Equal(t, Charged{Dead: true}, g.Charge(r, (x+100)*w, 1, 0), name)

		far := g.New(t0, 10, "k")
		require.Equal(t, Charged{Dead: true}, g.Charge(far, (x+reviveGap)*w, 1, 0), name)
		require.Equal(t, (x+reviveGap)*w, g.RetiredAt(far), name)
	}
	lg := NewLog(sec)
	r := lg.New(t0, 10, "k")
	require.True(t, lg.Retire(r, t0+2*sec))
	require.Equal(t, Charged{Dead: true}, lg.Charge(r, t0+2*sec, 1, 10))
}

// A writer at a later epoch walks the slots between a charge's add and
// its final check: the charge undoes its add, marks the cache words that
// may have counted it, and records its units at the new epoch instead;
// nothing is counted twice, and the next decision walks again.
func TestChargeUndoneWhenTheKeyMovesOn(t *testing.T) {
	g := NewGeometry(sec/10, 10, true, false)
	w := g.Width()
	r := g.New(t0, 10, "k")
	x := t0 / w
	require.True(t, g.Acquire(r, x*w, 2, 10).Allowed)
	fired := false
	g.testHookAdded = func(e int64) {
		if fired {
			return
		}
		fired = true
		require.Equal(t, x, e)
		// Walks x's slot with the charge in it, and caches 2+3.
		require.True(t, g.Acquire(r, (x+1)*w, 1, 10).Allowed)
		full, _ := cacheWords(g, r)
		require.Equal(t, pack.Word(pack.TagOf(x+1), 5), full)
	}
	c := g.Charge(r, x*w, 3, 0)
	g.testHookAdded = nil
	require.True(t, fired)
	require.Equal(t, Charged{Epoch: x + 1}, c, "retried at the key's new epoch")
	require.Equal(t, pack.Word(pack.TagOf(x), 2), r.word(g.hdr+g.index(x)).Load(), "the add at x was undone")
	require.Equal(t, pack.Word(pack.TagOf(x+1), 4), r.word(g.hdr+g.index(x+1)).Load())
	full, _ := cacheWords(g, r)
	require.NotEqual(t, pack.TagOf(x+1), pack.TagOfWord(full), "the over-counting cache word is marked")
	require.Equal(t, int64(4), g.Peek(r, (x+1)*w, 0, 10).Remaining, "2 + 1 + 3 counted once")
	require.True(t, g.Acquire(r, (x+1)*w, 4, 10).Allowed)
	require.False(t, g.Acquire(r, (x+1)*w, 1, 10).Allowed)
}

// Charges racing admissions on one key, across sub-window boundaries but
// inside one window: every charged and admitted unit is counted exactly
// once in the sub-window its result names, and (Strict) the admitted units
// never pass the limit, debts or not.
func TestChargeRacesAdmissions(t *testing.T) {
	const N, limit = 8, 500
	g := NewGeometry(sec/10, N, false, false)
	w := g.Width()
	r := g.New(t0, limit, "k")
	x := t0 / w
	var clock sync.Mutex
	now := x * w
	tick := func(d int64) int64 {
		clock.Lock()
		defer clock.Unlock()
		if now+d < (x+N)*w { // stay inside one window: nothing leaves
			now += d
		}
		return now
	}
	type tally struct{ admitted, charged map[int64]int64 }
	const G = 8
	tallies := make([]tally, G)
	done := make(chan struct{})
	for i := range G {
		tallies[i] = tally{map[int64]int64{}, map[int64]int64{}}
		go func() {
			defer func() { done <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			for range scaled(2000, 20000) {
				at := tick(rng.Int64N(w / 200))
				n := 1 + rng.Int64N(3)
				if rng.IntN(4) == 0 {
					c := g.Charge(r, at, n, 0)
					if !c.Dead && !c.Full {
						tallies[i].charged[c.Epoch] += n
					}
					continue
				}
				if res := g.Acquire(r, at, n, limit); res.Allowed {
					tallies[i].admitted[res.Epoch] += n
				}
			}
		}()
	}
	for range G {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("a writer did not finish")
		}
	}
	var admitted int64
	want := map[int64]int64{}
	for _, tl := range tallies {
		for e, n := range tl.admitted {
			want[e] += n
			admitted += n
		}
		for e, n := range tl.charged {
			want[e] += n
		}
	}
	require.LessOrEqual(t, admitted, int64(limit), "strict: admissions never pass the limit")
	for e := x; e < x+N; e++ {
		require.Equal(t, want[e], g.countIn(r, g.index(e), e, x+N), "epoch x%+d", e-x)
	}
}

// The log against its model with charges among the decisions: a charge
// that does not fit asks for a larger ring, which the test grows as the
// engine does, up to keep live units; past that it records nothing (Full).
// Every decision and RetryAfter is the model's, which keeps every unit.
func TestLogChargeMatchesModel(t *testing.T) {
	for _, tc := range []struct{ limit, keep int64 }{{1, 1}, {3, 3}, {7, 7}, {3, 12}, {5, 40}} {
		for seed := uint64(1); seed <= scaled[uint64](3, 8); seed++ {
			rng := rand.New(rand.NewPCG(seed, uint64(tc.keep)))
			const win = 100
			g := NewLog(win)
			now := t0
			r := g.New(now, tc.limit, "k")
			m := &modelLog{newest: now, win: win}
			limit := tc.limit
			grows, fulls := 0, 0
			for i := 0; i < 1500; i++ {
				switch rng.IntN(8) {
				case 0:
					now -= rng.Int64N(50)
				case 1:
					now += win + rng.Int64N(win)
				default:
					now += rng.Int64N(30)
				}
				switch rng.IntN(6) {
				case 0:
					n := 1 + rng.Int64N(tc.keep)
					for {
						c := g.Charge(r, now, n, tc.keep)
						require.False(t, c.Dead)
						if c.Full {
							// A refused charge changes nothing, not even the key's time.
							in := int64(len(m.live(max(m.newest, now))))
							require.Greater(t, in+n, tc.keep, "seed %d step %d: Full with %d live", seed, i, in)
							fulls++
							break
						}
						if c.Grow == 0 {
							require.Equal(t, m.charge(now, n), c.Epoch)
							break
						}
						require.LessOrEqual(t, c.Grow, tc.keep)
						var moved bool
						r, moved = g.GrowCap(r, c.Grow)
						require.True(t, moved)
						grows++
					}
					continue
				case 1:
					// Any limit the ring can hold.
					limit = 1 + rng.Int64N(*r.at(logCap))
					require.True(t, g.SetLimit(r, limit))
				}
				n := 1 + rng.Int64N(limit)
				if rng.IntN(4) == 0 {
					n = rng.Int64N(limit+3) - 1
					require.Equal(t, m.decide(now, n, limit, false), g.Peek(r, now, n, limit), "seed %d step %d: Peek(t0%+d, %d) limit %d", seed, i, now-t0, n, limit)
					continue
				}
				require.Equal(t, m.decide(now, n, limit, true), g.Acquire(r, now, n, limit), "seed %d step %d: Acquire(t0%+d, %d) limit %d", seed, i, now-t0, n, limit)
			}
			if tc.keep > tc.limit {
				require.Positive(t, grows, "the ring grew for a debt")
			}
			require.Positive(t, fulls, "some charge passed keep")
			require.LessOrEqual(t, *r.at(logCap), tc.keep)
		}
	}
}

// GrowCap moves the units and keeps the limit; a retired log is not grown.
func TestLogGrowCapKeepsTheLimit(t *testing.T) {
	g := NewLog(sec)
	r := g.New(t0, 4, "k")
	require.True(t, g.Acquire(r, t0, 3, 4).Allowed)
	require.True(t, g.SetLimit(r, 2))
	require.Equal(t, Charged{Epoch: t0 + 1, Grow: 9}, g.Charge(r, t0+1, 6, 100), "3 + 6 units, more than twice 4")
	require.Equal(t, Charged{Epoch: t0 + 1, Full: true}, g.Charge(r, t0+1, 6, 8), "3 + 6 units, more than keep")
	big, moved := g.GrowCap(r, 9)
	require.True(t, moved)
	require.True(t, g.Retired(r))
	require.Equal(t, int64(2), g.Limit(big), "the limit stays")
	require.Equal(t, int64(9), *big.at(logCap))
	require.Equal(t, Charged{Epoch: t0 + 1}, g.Charge(big, t0+1, 6, 100))
	d := g.Peek(big, t0+1, 1, 2)
	require.False(t, d.Allowed)
	require.Equal(t, sec, d.RetryAfter, "1 of the 9 units may stay: the 8 oldest must leave, the 8th (t0+1) at t0+1+1s")
	same, moved := g.GrowCap(r, 20)
	require.False(t, moved)
	require.True(t, same == r)
}

// Charges racing admissions while the key's time crosses many
// sub-windows: the admitted units never pass the counting bounds of §1,
// whatever the debts (Strict: any N+1 consecutive sub-windows hold at most
// L admitted units; weighted: any N).
func TestChargeRacesAdmissionsAcrossBoundaries(t *testing.T) {
	for _, weighted := range []bool{false, true} {
		const N, limit = 4, 40
		g := NewGeometry(sec/100, N, weighted, false)
		w := g.Width()
		r := g.New(t0, limit, "k")
		x := t0 / w
		var mu sync.Mutex
		admitted := map[int64]int64{}
		var clock sync.Mutex
		now := x * w
		tick := func(d int64) int64 {
			clock.Lock()
			defer clock.Unlock()
			now += d
			return now
		}
		const G = 6
		done := make(chan struct{})
		for i := range G {
			go func() {
				defer func() { done <- struct{}{} }()
				rng := rand.New(rand.NewPCG(uint64(i), 17))
				for range scaled(3000, 30000) {
					at := tick(rng.Int64N(w / 400))
					if rng.IntN(10) == 0 {
						g.Charge(r, at, 1+rng.Int64N(2), 0)
						continue
					}
					n := 1 + rng.Int64N(3)
					if res := g.Acquire(r, at, n, limit); res.Allowed {
						mu.Lock()
						admitted[res.Epoch] += n
						mu.Unlock()
					}
				}
			}()
		}
		for range G {
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("a writer did not finish")
			}
		}
		span := int64(N + 1)
		if weighted {
			span = N
		}
		last := now / w
		best := int64(0)
		for e := x; e <= last; e++ {
			var sum int64
			for k := e - span + 1; k <= e; k++ {
				sum += admitted[k]
			}
			if sum > limit {
				t.Fatalf("weighted=%v: %d admitted units in the %d sub-windows ending at x%+d", weighted, sum, span, e-x)
			}
			best = max(best, sum)
		}
		if best < limit*3/4 {
			t.Fatalf("weighted=%v: the busiest span held %d of %d admitted units: the test never came near the limit", weighted, best, limit)
		}
		t.Logf("weighted=%v: %d sub-windows, the busiest span %d of %d", weighted, last-x+1, best, limit)
	}
}
