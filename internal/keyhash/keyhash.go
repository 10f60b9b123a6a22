// Package keyhash hashes a key once; the engine reuses that one hash for the
// shard and for the map's buckets.
package keyhash

import "github.com/cespare/xxhash/v2"

// Sum returns the xxhash64 of key.
func Sum(key string) uint64 { return xxhash.Sum64String(key) }

// Mix folds seed into h with the murmur3 64-bit finaliser. Each engine and
// each map table has its own seed, so an attacker who chooses keys cannot
// aim them at one shard or one bucket without knowing the seed; keys whose
// full 64-bit xxhash collides still share a bucket chain (they never share a
// count: the full key is compared).
func Mix(h, seed uint64) uint64 {
	h ^= seed
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
