package bench_test

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/puzpuzpuz/xsync/v3"

	"github.com/ringlimit/ringlimit/engine"
)

// BenchmarkLayout compares, at 1M and 10M keys with N = 10, the engine's
// layout (a map entry pointing at one 96-byte ring object per key) with a
// pointer-free prototype (the map entry holds a uint32 index into slabs of
// int64 words, so rings are not heap objects at all). It reports bytes per
// key, the time of one forced GC with the keys live, and the GC's scannable
// heap and object count. The key strings are allocated before the first
// reading and are not counted.
func BenchmarkLayout(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		for _, layout := range []string{"engine", "slab"} {
			b.Run("layout="+layout+"/keys="+benchKeysLabel(n), func(b *testing.B) {
				if n > 1_000_000 && testing.Short() {
					b.Skip("10M keys need several GB; skipped with -short")
				}
				keys := benchKeys(n)
				m0 := readGCMetrics()
				var live any
				if layout == "engine" {
					e, err := engine.New(engine.Config{Limit: 100, Window: time.Second, SubWindows: 10, DisableEviction: true})
					if err != nil {
						b.Fatal(err)
					}
					defer e.Close()
					for _, k := range keys {
						e.AllowAt(k, 1, benchT0)
					}
					live = e
				} else {
					s := newSlabTable(12) // last + 11 slots, as the engine's ring
					for _, k := range keys {
						s.add(k)
					}
					live = s
				}
				m1 := readGCMetrics()
				start := time.Now()
				runtime.GC()
				gc := time.Since(start)
				for b.Loop() {
				}
				b.ReportMetric(float64(m1.heap-m0.heap)/float64(n), "B/key")
				b.ReportMetric(float64(m1.scan-m0.scan)/float64(n), "scan-B/key")
				b.ReportMetric(float64(m1.objects-m0.objects)/float64(n), "objects/key")
				b.ReportMetric(float64(gc.Milliseconds()), "gc-ms")
				runtime.KeepAlive(live)
				runtime.KeepAlive(keys)
			})
		}
	}
}

type gcMetrics struct{ heap, scan, objects uint64 }

// readGCMetrics runs two GCs, then reads the live heap, its scannable part
// and the object count.
func readGCMetrics() gcMetrics {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/scan/heap:bytes"},
		{Name: "/gc/heap/objects:objects"},
	}
	metrics.Read(s)
	return gcMetrics{s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()}
}

// slabTable is the pointer-free prototype: rings live in fixed-size chunks
// of int64 words (no pointers, so the GC never scans them and they are a
// few large objects), addressed by a uint32 index that the map stores. It
// is only what the measurement needs: insertion and a lookup.
type slabTable struct {
	m      *xsync.MapOf[slabKey, uint32]
	words  int
	chunks [][]atomic.Int64
	next   uint32
}

type slabKey struct {
	h uint64
	s string
}

const slabChunkRings = 1 << 14

func newSlabTable(words int) *slabTable {
	return &slabTable{
		m:     xsync.NewMapOfWithHasher[slabKey, uint32](func(k slabKey, seed uint64) uint64 { return k.h ^ seed }),
		words: words,
	}
}

func (s *slabTable) add(key string) {
	idx := s.next
	s.next++
	if int(idx)/slabChunkRings == len(s.chunks) {
		s.chunks = append(s.chunks, make([]atomic.Int64, slabChunkRings*s.words))
	}
	ring := s.chunks[idx/slabChunkRings][int(idx%slabChunkRings)*s.words:]
	ring[0].Store(1) // last
	ring[1].Add(1)   // one unit in a slot
	s.m.Store(slabKey{xxhash.Sum64String(key), key}, idx)
}
