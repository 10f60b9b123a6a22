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
//
// The counters run at the largest limit, so every request is admitted. The
// log holds a timestamp per unit, so it runs at DefaultMaxLogLimit: with the
// caller's time it moves W/L per request (one time.Time.Add more per
// iteration), so the key sits at its limit and every request is admitted as
// its oldest unit leaves; with the coarse clock it fills within the first
// Limit requests and then mostly measures its deny path.
func BenchmarkHotKey(b *testing.B) {
	for _, alg := range allAlgorithms {
		limit, step := int64(engine.MaxLimit), time.Duration(0)
		if alg == engine.SlidingLog {
			limit = engine.DefaultMaxLogLimit
			step = time.Second / time.Duration(limit)
		}
		b.Run("alg="+alg.String()+"/clock=at", func(b *testing.B) {
			e := newEngine(b, engine.Config{Limit: limit, Window: time.Second, Algorithm: alg, DisableEviction: true})
			e.AllowAt("hot-key", 1, t0)
			b.ReportAllocs()
			if step == 0 {
				for b.Loop() {
					sinkDecision = e.AllowAt("hot-key", 1, t0)
				}
				return
			}
			now := t0
			for b.Loop() {
				now = now.Add(step)
				sinkDecision = e.AllowAt("hot-key", 1, now)
			}
		})
		b.Run("alg="+alg.String()+"/clock=coarse", func(b *testing.B) {
			e := newEngine(b, engine.Config{Limit: limit, Window: time.Second, Algorithm: alg, CoarseClock: time.Millisecond})
			e.Allow("hot-key")
			b.ReportAllocs()
			for b.Loop() {
				sinkDecision.Allowed = e.Allow("hot-key")
			}
		})
	}
}
