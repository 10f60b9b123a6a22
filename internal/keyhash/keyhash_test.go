package keyhash

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSumIsSeeded(t *testing.T) {
	a, b := NewSeed(), NewSeed()
	require.Equal(t, Sum(a, "tenant-1"), Sum(a, "tenant-1"), "one seed, one hash")
	require.NotEqual(t, Sum(a, "tenant-1"), Sum(b, "tenant-1"), "each seed its own hash")
	require.NotEqual(t, Sum(a, "tenant-1"), Sum(a, "tenant-2"))
}

func TestSumSpreadsHighAndLowBits(t *testing.T) {
	// The top bits pick a shard, the low bits xsync's tag and bucket.
	s := NewSeed()
	hi, lo := map[uint64]bool{}, map[uint64]bool{}
	for i := range 1000 {
		h := Sum(s, string(rune('a'+i%26))+string(rune(i)))
		hi[h>>58] = true
		lo[h&63] = true
	}
	require.Greater(t, len(hi), 60)
	require.Greater(t, len(lo), 60)
}
