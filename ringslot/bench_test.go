package ringslot

import (
	"sync/atomic"
	"testing"
)

var sinkResult Result

// BenchmarkAcquire measures one ring's decision alone, without the key
// lookup: admitted, denied (full key, RetryAfter computed) and a peek.
func BenchmarkAcquire(b *testing.B) {
	g := NewGeometry(sec/10, 10, true, false)
	b.Run("allowed", func(b *testing.B) {
		b.ReportAllocs()
		r := g.New(t0, 0)
		for i := 0; i < b.N; i++ {
			sinkResult = g.Acquire(r, t0+int64(i), 1, 1<<40-1)
		}
	})
	b.Run("denied", func(b *testing.B) {
		b.ReportAllocs()
		r := g.New(t0, 0)
		g.Acquire(r, t0, 100, 100)
		for i := 0; i < b.N; i++ {
			sinkResult = g.Acquire(r, t0+int64(i&1023), 1, 100)
		}
	})
	b.Run("baseline=sum11+cas", func(b *testing.B) {
		b.ReportAllocs()
		var s [12]atomic.Int64
		for i := 0; i < b.N; i++ {
			var sum int64
			for j := 1; j < 12; j++ {
				sum += s[j].Load()
			}
			s[1].CompareAndSwap(sum, sum+1)
			sinkResult.Remaining = sum
		}
	})
}
