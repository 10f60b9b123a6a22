package keyhash

import (
	"hash/maphash"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// BenchmarkHash is the cost of hashing one 13-byte key ("tenant-123456",
// the length of bench/peers' keys at 1M): the product's hash (xxhash and
// the seeded mix), its two parts, and hash/maphash, the seeded hash a
// switch would use (docs/benchmarks.md, "Hashing"). Each iteration's key
// depends on the previous hash, so the figures are latencies, as on the
// decision path, where the shard and the lookup wait for the hash.
func BenchmarkHash(b *testing.B) {
	var keys [8]string
	for i := range keys {
		keys[i] = "tenant-12345" + string(rune('0'+i))
	}
	seed := NewSeed()
	ms := maphash.MakeSeed()
	cases := []struct {
		name string
		fn   func(string) uint64
	}{
		{"xxhash+mix", func(k string) uint64 { return Sum(seed, k) }},
		{"xxhash", xxhash.Sum64String},
		{"mix", func(k string) uint64 { return Mix(uint64(len(k))^uint64(k[0]), uint64(seed)) }},
		{"maphash", func(k string) uint64 { return maphash.String(ms, k) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var h uint64
			for b.Loop() {
				h = c.fn(keys[h&7])
			}
		})
	}
}
