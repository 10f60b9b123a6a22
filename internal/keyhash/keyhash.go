// Package keyhash hashes a key once; the engine reuses that one hash for the
// shard, the map's buckets and the map's key.
package keyhash

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Seed is a random per-table hash seed: every engine has its own, so that
// an attacker who chooses keys cannot aim them at one shard or bucket
// without knowing it.
type Seed uint64

// NewSeed returns a new random Seed.
func NewSeed() Seed {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on the platforms Go supports
	return Seed(binary.LittleEndian.Uint64(b[:]))
}

// Sum returns the 64-bit hash of key under seed: xxhash64 of the key, with
// the seed folded in by the murmur3 64-bit finaliser. It sits on the
// decision's critical path (docs/design.md §5). Keys whose xxhash64
// collides in full (a collision an attacker can search for offline, about
// 2^32 hashes for one pair) still never share a count: the table compares
// the key, and a second key of one hash lives in the fallback map.
func Sum(seed Seed, key string) uint64 { return Mix(xxhash.Sum64String(key), uint64(seed)) }

// Mix folds seed into h with the murmur3 64-bit finaliser.
func Mix(h, seed uint64) uint64 {
	h ^= seed
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
