package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// BenchmarkTokenBucket puts a token-bucket decision on one key next to the
// sliding window's, in one run, one goroutine, the caller's time: op=allow
// admits (the time moves one emission interval per request, 1 ns at 10^9
// per second, so the bucket stays at its burst), op=deny refuses (a frozen
// time, the bucket empty); alg=sliding is BenchmarkHotKey's clock=at case,
// the baseline.
func BenchmarkTokenBucket(b *testing.B) {
	b.Run("alg=token/op=allow", func(b *testing.B) {
		e := newEngine(b, engine.Config{Algorithm: engine.TokenBucket, Limit: 1_000_000_000, Window: time.Second, Burst: 1_000_000, DisableEviction: true})
		now := t0
		e.AllowAt("hot-key", 1, now)
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(1)
			sinkDecision = e.AllowAt("hot-key", 1, now)
		}
	})
	b.Run("alg=token/op=deny", func(b *testing.B) {
		e := newEngine(b, engine.Config{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: 1, DisableEviction: true})
		e.AllowAt("hot-key", 1, t0)
		b.ReportAllocs()
		for b.Loop() {
			sinkDecision = e.AllowAt("hot-key", 1, t0)
		}
	})
	b.Run("alg=sliding/op=allow", func(b *testing.B) {
		e := newEngine(b, engine.Config{Limit: engine.MaxLimit, Window: time.Second, DisableEviction: true})
		e.AllowAt("hot-key", 1, t0)
		b.ReportAllocs()
		for b.Loop() {
			sinkDecision = e.AllowAt("hot-key", 1, t0)
		}
	})
}
