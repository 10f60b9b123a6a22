package ringslot

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Reset retires a ring at its newest time whatever its counts, once, and
// tells before that time first; a writer holding the ring finds it dead.
func TestResetRetiresAtTheNewestTime(t *testing.T) {
	const w = sec / 10
	for _, g := range []*Geometry{NewGeometry(w, 10, true, false), NewGeometry(w, 10, false, true), NewLog(sec)} {
		r := g.New(t0, 5, "k")
		late := t0 + 3*w + 7
		require.True(t, g.Acquire(r, late, 5, 5).Allowed)
		newest := g.Newest(r)
		var told []int64
		at, ok := g.Reset(r, func(at int64) { told = append(told, at) })
		require.True(t, ok)
		require.Equal(t, newest, at, "log %v", g.IsLog())
		require.Equal(t, []int64{at}, told)
		require.True(t, g.Retired(r))
		require.Equal(t, at, g.RetiredAt(r), "a replacement starts at R or later")
		require.True(t, g.Acquire(r, late, 1, 5).Dead, "writers holding it decide again elsewhere")
		_, ok = g.Reset(r, func(int64) { t.Fatal("before on a retired ring") })
		require.False(t, ok, "once")
	}
}
