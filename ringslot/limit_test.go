package ringslot

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/internal/pack"
)

// Tests of a per-key limit changed while a decision is in flight
// (docs/design.md §3c). The caller reads the ring's limit and passes it to
// Acquire; the limit may be lowered before the decision is made. Each
// interleaving is forced, and each test failed on the code before the
// limit word was read again in Acquire (and under the log's lock).

// limitGeometries are the four algorithms with per-key limits, and the
// sub-window width each uses.
func limitGeometries() map[string]struct {
	g *Geometry
	w int64
} {
	return map[string]struct {
		g *Geometry
		w int64
	}{
		"sliding": {NewGeometry(sec/10, 10, true, true), sec / 10},
		"strict":  {NewGeometry(sec/10, 10, false, true), sec / 10},
		"fixed":   {NewGeometry(sec, 0, false, true), sec},
		"log":     {NewLog(sec), sec},
	}
}

// A decision whose caller read the limit before it was lowered: B filled
// the new limit, 7, and A comes with the 8 it read. It must record nothing
// and say Stale, so that the caller reads the limit again; admitting it
// would hold 8 units under a limit of 7.
func TestAcquireWithALimitLoweredSinceItWasReadRecordsNothing(t *testing.T) {
	for name, c := range limitGeometries() {
		t.Run(name, func(t *testing.T) {
			g := c.g
			r := g.New(t0, 8, "k")
			require.True(t, g.Acquire(r, t0, 6, 8).Allowed)
			require.True(t, g.SetLimit(r, 7))
			require.True(t, g.Acquire(r, t0, 1, g.Limit(r)).Allowed, "B: 7 of 7")
			a := g.Acquire(r, t0, 1, 8) // A, with the limit it read before the change
			require.False(t, a.Allowed, "8 units under a limit of 7")
			require.True(t, a.Stale && a.Dead, "the caller must read the limit again")
			allowed, dead := g.Admit(r, t0, 1, 8)
			require.False(t, allowed)
			require.True(t, dead, "Admit reports a stale limit as dead, so that the caller retries")
			require.Zero(t, g.Peek(r, t0, 0, 7).Remaining, "A recorded nothing")
			require.False(t, g.Retired(r))
			// A limit above the one read is no reason to retry: deciding
			// under the lower one can only refuse early.
			require.True(t, g.SetLimit(r, 8))
			res := g.Acquire(r, t0, 1, 7)
			require.False(t, res.Allowed || res.Dead, "7 held: no room under 7, the limit the caller read")
		})
	}
}

// The limit is lowered, and B fills it, after A's clamp and before A's
// CAS: A read 8 before the change, so its check lets 8 units in. Its final
// check sees the limit word changed, undoes the add and says Stale.
func TestLimitLoweredDuringADecisionUndoesIt(t *testing.T) {
	for name, c := range limitGeometries() {
		if c.g.log {
			continue // a log decides under its lock, which SetLimit takes: no such interleaving
		}
		t.Run(name, func(t *testing.T) {
			g := c.g
			r := g.New(t0, 8, "k")
			require.True(t, g.Acquire(r, t0, 6, 8).Allowed)
			fired := false
			g.testHookClamped = func(int64) {
				if fired {
					return
				}
				fired = true
				require.True(t, g.SetLimit(r, 7))
				require.True(t, g.Acquire(r, t0, 1, g.Limit(r)).Allowed, "B: 7 of 7")
			}
			a := g.Acquire(r, t0, 1, 8)
			require.True(t, fired)
			require.False(t, a.Allowed, "8 units under a limit of 7")
			require.True(t, a.Stale)
			require.Zero(t, g.Peek(r, t0, 0, 7).Remaining, "A's add was undone: 7 held")
			require.True(t, g.Acquire(r, t0+1, 1, 8).Stale, "the retry reads the limit again")
			require.False(t, g.Acquire(r, t0+1, 1, 7).Allowed, "and is refused")
		})
	}
}

// What the final check accepts. Lowered and raised back (8 → 7 → 8)
// between A's first read and its final check: the limit at A's CAS may
// have been 7, and the value alone cannot tell, so the version does:
// Stale. Raised once (8 → 9): every limit in force meanwhile was at least
// the 8 A decided under, so its admission stands; no false denial. Raised,
// then lowered (8 → 9 → 7): Stale.
func TestLimitChangesDuringADecisionAreJudgedByVersion(t *testing.T) {
	cases := []struct {
		name    string
		changes []int64
		kept    bool
	}{
		{"lowered and raised back", []int64{7, 8}, false},
		{"raised once", []int64{9}, true},
		{"raised then lowered", []int64{9, 7}, false},
		{"set to the same value", []int64{8}, true},
	}
	for _, tc := range cases {
		for name, c := range limitGeometries() {
			if c.g.log {
				continue
			}
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				g := c.g
				r := g.New(t0, 8, "k")
				require.True(t, g.Acquire(r, t0, 6, 8).Allowed)
				fired := false
				g.testHookAdded = func(int64) { // after A's CAS, before its final checks
					if !fired {
						fired = true
						for _, l := range tc.changes {
							require.True(t, g.SetLimit(r, l))
						}
					}
				}
				a := g.Acquire(r, t0, 1, 8)
				require.True(t, fired)
				require.Equal(t, tc.kept, a.Allowed)
				require.Equal(t, !tc.kept, a.Stale)
				held := int64(6)
				if tc.kept {
					held = 7
				}
				require.Equal(t, g.Limit(r)-held, g.Peek(r, t0, 0, g.Limit(r)).Remaining)
			})
		}
	}
}

// The version wraps: a change from version 2^24 − 1 goes to version 0,
// without carrying into anything, and the final check still sees exactly
// one change across the wrap.
func TestLimitVersionWraps(t *testing.T) {
	g := NewGeometry(sec/10, 10, true, true)
	r := g.New(t0, 8, "k")
	top := pack.Word(1<<pack.TagBits-1, 8)
	r.word(g.limitAt).Store(top)
	require.Equal(t, int64(8), g.Limit(r))
	require.True(t, g.SetLimit(r, 9))
	w := r.word(g.limitAt).Load()
	require.Equal(t, pack.Word(0, 9), w)
	require.Equal(t, int64(9), g.Limit(r))
	require.True(t, limitHeld(top, w, 8), "one raise across the wrap")
	require.False(t, limitHeld(top, w, 10), "a limit below the one decided under")
	require.True(t, g.SetLimit(r, 7))
	require.False(t, limitHeld(top, r.word(g.limitAt).Load(), 7), "two changes")
}
