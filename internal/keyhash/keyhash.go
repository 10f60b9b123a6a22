// Package keyhash hashes a key once; the engine reuses that one hash for the
// shard, the map's buckets and the map's key.
package keyhash

import "hash/maphash"

// Seed is a random per-table hash seed (hash/maphash's): every engine has
// its own, so that an attacker who chooses keys cannot aim them at one
// shard or bucket, nor make two keys' 64-bit hashes collide, without
// knowing it.
type Seed = maphash.Seed

// NewSeed returns a new random Seed.
func NewSeed() Seed { return maphash.MakeSeed() }

// Sum returns the 64-bit hash of key under seed: the runtime's own string
// hash (AES-based where the CPU has AES instructions), which costs about a
// third of xxhash64 plus a seed-mixing finaliser on short keys, and sits on
// the decision's critical path (docs/design.md §5). Keys whose hashes
// collide in full still never share a count: the table compares the key.
func Sum(seed Seed, key string) uint64 { return maphash.String(seed, key) }
