//go:build !ringlimit_slabchurn

package shard

// The slab's sizing (slab.go). The build tag ringlimit_slabchurn replaces
// it with tiny slabs filled to the last slot (slabtune_churn.go), so that
// every test of the engine runs with slabs near full and a new generation
// every few keys.
const (
	// slabMinSlots is the smallest slab: 8 KiB of 128-byte slots.
	slabMinSlots = 64
	// slabFillShift is the share of a slab's slots, as a shift (1/2),
	// claimed before the table starts the next one. With two candidate
	// slots a key finds both taken with a probability of about fill² when
	// it is created: about 8% of the keys over a fill from 0 to 1/2.
	slabFillShift = 1
	// slabPerKey is the slots a new slab has per key present (a power of
	// two at or above it is taken): the next slab absorbs at least as many
	// new keys as the table holds before it fills.
	slabPerKey = 2
)
