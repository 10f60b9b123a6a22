package ringslot

import (
	"sync/atomic"
	"testing"
)

var sinkResult Result

// sinkParallel keeps each parallel goroutine's last result observable.
var sinkParallel atomic.Int64

// BenchmarkAcquire measures one ring's decision alone, without the key
// lookup: admitted, denied (full key, RetryAfter computed) and a peek.
func BenchmarkAcquire(b *testing.B) {
	g := NewGeometry(sec/10, 10, true, false)
	b.Run("allowed", func(b *testing.B) {
		b.ReportAllocs()
		r := g.New(t0, 0, "k")
		for i := 0; i < b.N; i++ {
			sinkResult = g.Acquire(r, t0+int64(i), 1, 1<<40-1)
		}
	})
	b.Run("denied", func(b *testing.B) {
		b.ReportAllocs()
		r := g.New(t0, 0, "k")
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

// BenchmarkAcquireLog compares the sliding log with the weighted ring on
// the same traffic, one goroutine and all of them (RunParallel) on one key:
//   - at-limit: a window of 1000 ns, limit 1000, one request per ns of the
//     caller's time (per goroutine when parallel), so the key sits at its
//     limit; serially the log admits every request (its oldest unit leaves
//     as the next arrives), in parallel most are denied.
//   - denied: a full key (limit 100, window 1s); every request is denied
//     and computes RetryAfter. The weighted ring's deny path only reads;
//     the log's takes the key's lock.
func BenchmarkAcquireLog(b *testing.B) {
	kinds := []struct {
		name string
		geo  func(window int64) *Geometry
	}{
		{"sliding", func(window int64) *Geometry { return NewGeometry(window/10, 10, true, false) }},
		{"log", NewLog},
	}
	for _, k := range kinds {
		b.Run("kind="+k.name+"/at-limit", func(b *testing.B) {
			g := k.geo(1000)
			r := g.New(t0, 1000, "k")
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				sinkResult = g.Acquire(r, t0+int64(i), 1, 1000)
			}
		})
		b.Run("kind="+k.name+"/denied", func(b *testing.B) {
			g := k.geo(sec)
			r := g.New(t0, 100, "k")
			g.Acquire(r, t0, 100, 100)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				sinkResult = g.Acquire(r, t0+int64(i&1023), 1, 100)
			}
		})
		b.Run("kind="+k.name+"/at-limit/parallel", func(b *testing.B) {
			g := k.geo(1000)
			r := g.New(t0, 1000, "k")
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var res Result
				for i := int64(0); pb.Next(); i++ {
					res = g.Acquire(r, t0+i, 1, 1000)
				}
				sinkParallel.Add(res.Remaining)
			})
		})
		b.Run("kind="+k.name+"/denied/parallel", func(b *testing.B) {
			g := k.geo(sec)
			r := g.New(t0, 100, "k")
			g.Acquire(r, t0, 100, 100)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var res Result
				for i := int64(0); pb.Next(); i++ {
					res = g.Acquire(r, t0+(i&1023), 1, 100)
				}
				sinkParallel.Add(res.Remaining)
			})
		})
	}
}
