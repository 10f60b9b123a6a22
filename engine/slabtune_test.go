//go:build !ringlimit_slabchurn

package engine_test

// slabDrops is true when a table keeps the slab's threshold: its first
// slab starts at slabThreshold keys, and a sweep that leaves fewer than
// half drops its slabs. Under the build tag ringlimit_slabchurn every
// table starts its slab at the first key and never drops it.
const slabDrops = true
