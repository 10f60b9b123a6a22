//go:build ringlimit_slabchurn

package shard

// Tiny slabs, filled to the last slot before the next starts, and sized
// to the keys present: for tests only (slabtune.go).
const (
	slabMinSlots  = 2
	slabFillShift = 62 // fill = slots − 0: the last slot
	slabPerKey    = 1
	slabFromKeys  = 0
	// slabChurn is true under the build tag ringlimit_slabchurn.
	slabChurn = true
)
