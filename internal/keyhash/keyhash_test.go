package keyhash

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSumIsXXHash64(t *testing.T) {
	// Reference values of xxhash64 with seed 0.
	require.Equal(t, uint64(0xef46db3751d8e999), Sum(""))
	require.Equal(t, uint64(0xd24ec4f1a98c6e5b), Sum("a"))
}

func TestMixDependsOnSeedAndSpreadsHighBits(t *testing.T) {
	require.NotEqual(t, Mix(1, 1), Mix(1, 2))
	require.NotEqual(t, Mix(1, 7), Mix(2, 7))
	// Consecutive inputs land in many different top-6-bit shards.
	seen := map[uint64]bool{}
	for i := uint64(0); i < 1000; i++ {
		seen[Mix(i, 42)>>58] = true
	}
	require.Greater(t, len(seen), 60)
}
