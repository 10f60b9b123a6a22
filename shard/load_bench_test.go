package shard

import (
	"strconv"
	"testing"

	"github.com/ringlimit/ringlimit/internal/keyhash"
	"github.com/ringlimit/ringlimit/ringslot"
)

// BenchmarkTableLoad measures Load of existing keys at 1M keys ("tenant-N",
// drawn by a per-goroutine xorshift, each key its own string), in
// parallel, with the hash seed fixed, so that two builds of the table put
// the keys in the same slabs' phase and compare on the same layout.
func BenchmarkTableLoad(b *testing.B) {
	for _, seed := range []uint64{1, 2} {
		b.Run("keys=1e6/seed="+strconv.FormatUint(seed, 10), func(b *testing.B) {
			g := ringslot.NewGeometry(sec/10, 10, true, false)
			tab := New(g, 64, 0)
			tab.seed = keyhash.Seed(seed)
			keys := make([]string, 1_000_000)
			fresh := freshAt(g, t0)
			for i := range keys {
				keys[i] = "tenant-" + strconv.Itoa(i)
				if _, err := tab.LoadOrCreate(tab.Hash(keys[i]), keys[i], fresh); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				x := uint64(0x9e3779b97f4a7c15)
				for pb.Next() {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					k := keys[((x>>32)*uint64(len(keys)))>>32]
					if _, ok := tab.Load(tab.Hash(k), k); !ok {
						b.Fatal("absent")
					}
				}
			})
		})
	}
}
