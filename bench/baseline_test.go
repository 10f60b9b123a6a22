package bench_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/puzpuzpuz/xsync/v3"
)

// benchPaddedInt64 is a counter alone on its cache line.
type benchPaddedInt64 struct {
	_ [64]byte
	atomic.Int64
	_ [56]byte
}

// baselineSlots is the baseline's per-key state: the 11 slots of N = 10.
type baselineSlots = [11]atomic.Int64

// baselineHashMapSum is the baseline decision: hash the key, load its slots
// from a lock-free map, add to one slot and sum all of them.
func baselineHashMapSum(m *xsync.MapOf[string, *baselineSlots], key string) int64 {
	h := xxhash.Sum64String(key)
	p, _ := m.Load(key)
	p[0].Add(1)
	var s int64
	for j := range p {
		s += p[j].Load()
	}
	return s ^ int64(h)
}

func baselineCases() []benchCase {
	benchNop := func() {}
	cs := []benchCase{
		{name: "baseline=atomic-add/serial", cleanup: benchNop, run: func(b *testing.B) {
			c := new(benchPaddedInt64)
			b.ResetTimer()
			for range b.N {
				c.Add(1)
			}
			b.StopTimer()
			benchSink.Add(c.Load())
		}},
		{name: "baseline=atomic-add/parallel", cleanup: benchNop, run: func(b *testing.B) {
			c := new(benchPaddedInt64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.Add(1)
				}
			})
			b.StopTimer()
			benchSink.Add(c.Load())
		}},
	}
	for _, n := range []int{1, 1_000} {
		for _, par := range []bool{false, true} {
			cs = append(cs, baselineHashMapSumCase(n, par))
		}
	}
	cs = append(cs,
		benchCase{name: "baseline=time.Now/serial", cleanup: benchNop, run: func(b *testing.B) {
			var t time.Time
			b.ResetTimer()
			for range b.N {
				t = time.Now()
			}
			b.StopTimer()
			benchSink.Add(t.UnixNano())
		}},
		benchCase{name: "baseline=time.Now/parallel", cleanup: benchNop, run: func(b *testing.B) {
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var t time.Time
				for pb.Next() {
					t = time.Now()
				}
				benchSink.Add(t.UnixNano())
			})
		}},
		benchCase{name: "baseline=time.Since/serial", cleanup: benchNop, run: func(b *testing.B) {
			start := time.Now()
			var d time.Duration
			b.ResetTimer()
			for range b.N {
				d = time.Since(start)
			}
			b.StopTimer()
			benchSink.Add(int64(d))
		}},
		benchCase{name: "baseline=time.Since/parallel", cleanup: benchNop, run: func(b *testing.B) {
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var d time.Duration
				for pb.Next() {
					d = time.Since(start)
				}
				benchSink.Add(int64(d))
			})
		}},
	)
	return cs
}

// baselineHashMapSumCase is the xxhash + xsync map + atomics baseline on n
// keys.
func baselineHashMapSumCase(n int, parallel bool) benchCase {
	var m *xsync.MapOf[string, *baselineSlots]
	var keys []string
	return benchCase{
		name: "baseline=hash-map-sum/keys=" + benchKeysLabel(n) + "/" + benchModeLabel(parallel),
		run: func(b *testing.B) {
			if m == nil {
				m = xsync.NewMapOf[string, *baselineSlots]()
				keys = benchKeys(n)
				for _, k := range keys {
					m.Store(k, new(baselineSlots))
				}
			}
			b.ResetTimer()
			if !parallel {
				var acc int64
				if n == 1 {
					key := keys[0]
					for range b.N {
						acc += baselineHashMapSum(m, key)
					}
				} else {
					r := newBenchRNG(1)
					for range b.N {
						acc += baselineHashMapSum(m, keys[r.intn(n)])
					}
				}
				b.StopTimer()
				benchSink.Add(acc)
				return
			}
			var seeds atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				var acc int64
				if n == 1 {
					key := keys[0]
					for pb.Next() {
						acc += baselineHashMapSum(m, key)
					}
				} else {
					r := newBenchRNG(uint64(seeds.Add(1)))
					for pb.Next() {
						acc += baselineHashMapSum(m, keys[r.intn(n)])
					}
				}
				benchSink.Add(acc)
			})
		},
		cleanup: func() { m, keys = nil, nil },
	}
}
