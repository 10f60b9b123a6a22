package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

var sinkDecision engine.Decision

// BenchmarkHotKey is the engine's own smallest case: one existing key, one
// goroutine, for each algorithm, with the caller's time and with the coarse
// clock. The full scenario table, with its baselines, is in bench/.
func BenchmarkHotKey(b *testing.B) {
	for _, alg := range allAlgorithms {
		b.Run("alg="+alg.String()+"/clock=at", func(b *testing.B) {
			e := newEngine(b, engine.Config{Limit: engine.MaxLimit, Window: time.Second, Algorithm: alg, DisableEviction: true})
			e.AllowAt("hot-key", 1, t0)
			b.ReportAllocs()
			for b.Loop() {
				sinkDecision = e.AllowAt("hot-key", 1, t0)
			}
		})
		b.Run("alg="+alg.String()+"/clock=coarse", func(b *testing.B) {
			e := newEngine(b, engine.Config{Limit: engine.MaxLimit, Window: time.Second, Algorithm: alg, CoarseClock: time.Millisecond})
			e.Allow("hot-key")
			b.ReportAllocs()
			for b.Loop() {
				sinkDecision.Allowed = e.Allow("hot-key")
			}
		})
	}
}
