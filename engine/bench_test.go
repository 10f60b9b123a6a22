package engine_test

import (
	"fmt"
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

// BenchmarkAudit measures what Config.Audit costs a decision: audit=off,
// audit=unsampled (Audit 0.001, a key the audit does not sample: the one
// compare and branch) and audit=sampled (Audit 1: the key's decision is
// also buffered; with no Audit call the background drain empties the
// buffer every AuditDrainInterval, and what finds it full is dropped).
// Compare with benchstat -col /audit.
func BenchmarkAudit(b *testing.B) {
	for _, path := range []string{"AllowAt", "Allow"} {
		for _, mode := range []string{"off", "unsampled", "sampled"} {
			b.Run("path="+path+"/audit="+mode, func(b *testing.B) {
				cfg := engine.Config{Limit: engine.MaxLimit, Window: time.Second, DisableEviction: true}
				switch mode {
				case "unsampled":
					cfg.Audit = 0.001
				case "sampled":
					cfg.Audit = 1
				}
				if path == "Allow" {
					cfg.CoarseClock = time.Millisecond
				}
				e := newEngine(b, cfg)
				key := "hot-key"
				for i := 0; mode == "unsampled" && e.Audited(key); i++ {
					key = fmt.Sprint("hot-key-", i)
				}
				e.AllowAt(key, 1, t0)
				e.Allow(key)
				b.ReportAllocs()
				if path == "AllowAt" {
					for b.Loop() {
						sinkDecision = e.AllowAt(key, 1, t0)
					}
					return
				}
				for b.Loop() {
					sinkDecision.Allowed = e.Allow(key)
				}
			})
		}
	}
}

// BenchmarkAuditDrain measures the drain's replay, per sampled decision:
// keys decide in turn at advancing times (a tenth of them denied), then
// Audit replays the buffer. It bounds how many sampled decisions per
// second the audit keeps up with before the buffer overflows (Dropped).
func BenchmarkAuditDrain(b *testing.B) {
	for _, keys := range []int{1, 1000} {
		b.Run(fmt.Sprint("keys=", keys), func(b *testing.B) {
			e := newEngine(b, engine.Config{Limit: 1000, Window: time.Second, Audit: 1, AuditBuffer: 1 << 16, DisableEviction: true})
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprint("key-", i)
			}
			e.Close() // the benchmark drains, not the background goroutine
			now := t0
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				e.AllowAt(names[i%keys], 1, now)
				if i++; i%(1<<15) == 0 {
					e.Audit()
				}
			}
			e.Audit()
			if r := e.Audit(); r.Dropped != 0 {
				b.Fatalf("dropped %d", r.Dropped)
			}
		})
	}
}
