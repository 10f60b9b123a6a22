//go:build ringlimit_slabchurn

package engine_test

// slabDrops is false under ringlimit_slabchurn (slabtune_test.go).
const slabDrops = false
