//go:build ringlimit_slabchurn

package shard

// Tiny slabs, filled to the last slot before the next starts, and sized
// to the keys present: for tests only (slabtune.go).
const (
	slabMinSlots  = 2
	slabFillShift = 0
	slabPerKey    = 1
)
