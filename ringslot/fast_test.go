package ringslot

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Acquire and Admit first try fast, which must decide exactly as acquire's
// loop does and leave the ring in the same state. Two rings get one random
// sequence, one through Acquire or Admit and one through acquire alone:
// every Result and every word of the two rings must match after each step.
// The times mostly stay in the key's newest sub-window (fast's case), and
// sometimes move on by a few sub-windows (a publish and a walk), jump past
// the window, or fall behind the key (a clamp); n sometimes does not fit.
func TestFastDecidesAsTheGeneralLoop(t *testing.T) {
	const w = sec / 10
	geos := map[string]*Geometry{
		"sliding":     NewGeometry(w, 10, true, false),
		"sliding N=1": NewGeometry(w, 1, true, false),
		"strict":      NewGeometry(w, 10, false, false),
		"fixed":       NewGeometry(w, 0, false, false),
	}
	for name, g := range geos {
		rng := rand.New(rand.NewPCG(7, 8))
		const limit = 40
		a, b := g.New(t0, 0, "k"), g.New(t0, 0, "k")
		now, fastCases := t0, 0
		for step := range 20_000 {
			switch x := rng.IntN(100); {
			case x < 70:
				now += rng.Int64N(w / 20)
			case x < 90:
				now += rng.Int64N(3 * w)
			case x < 93:
				now += 12 * w
			}
			at := now
			if rng.IntN(20) == 0 {
				at -= rng.Int64N(2 * w) // behind the key's newest sub-window
			}
			n := 1 + rng.Int64N(limit/4)
			if rng.IntN(10) == 0 {
				n = 1 + rng.Int64N(limit)
			}
			if e, _ := g.split(at); a.word(wordLast).Load() == e {
				fastCases++
			}
			want := g.acquire(b, at, n, limit, true)
			if step%2 == 0 {
				got := g.Acquire(a, at, n, limit)
				require.Equal(t, want, got, "%s: step %d, t=%d, n=%d", name, step, at, n)
			} else {
				allowed, dead := g.Admit(a, at, n, limit)
				require.Equal(t, [2]bool{want.Allowed, want.Dead}, [2]bool{allowed, dead}, "%s: step %d, t=%d, n=%d", name, step, at, n)
			}
			for i := range g.words {
				require.Equal(t, b.word(i).Load(), a.word(i).Load(), "%s: step %d: word %d", name, step, i)
			}
		}
		require.Greater(t, fastCases, 10_000, "%s: the sequence must mostly be fast's case", name)
	}
}
