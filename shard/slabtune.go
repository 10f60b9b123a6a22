//go:build !ringlimit_slabchurn

package shard

// The slab's sizing (slab.go). The build tag ringlimit_slabchurn replaces
// it with tiny slabs filled to the last slot (slabtune_churn.go), so that
// every test of the engine runs with slabs near full and a new generation
// every few keys.
const (
	// slabMinSlots is the smallest slab: 8 KiB of 128-byte slots.
	slabMinSlots = 64
	// slabFillShift: the table starts the next slab when the claimed
	// slots reach all but 1/2^slabFillShift of the newest (3/4). With two
	// candidate slots a key finds both taken with a probability of about
	// fill² when it is created: about 19% of the keys over a fill from 0
	// to 3/4 (and 8% to 1/2, which left more keys in older slabs while a
	// table grows to a million: 53% of them in the two slabs probed,
	// against 71%; docs/benchmarks.md).
	slabFillShift = 2
	// slabPerKey is the slots a new slab has per key present (a power of
	// two at or above it is taken): the next slab absorbs at least as many
	// new keys as the table holds before it fills.
	slabPerKey = 2
	// slabFromKeys is the number of keys present at which a table starts
	// its first slab (of 2^18 slots); a sweep that leaves fewer than half
	// as many drops the slabs. Below it the map and the states stay in
	// cache, and the slab's probes only add lines: at 1k keys and on a
	// Zipf draw of 100k, whose hot keys are the oldest (created before
	// the slabs Load probes), a decision took 2–12% and 14–26% longer
	// with the slab from the first key (docs/benchmarks.md, "The home
	// slab's cost"), and a uniform draw of 100k keys gained nothing.
	slabFromKeys = 1<<17 - 1
	// slabChurn is true under the build tag ringlimit_slabchurn.
	slabChurn = false
)
