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

var sinkOK bool

// BenchmarkReserveCancel puts Reserve and Cancel next to AllowAt on one
// existing key, one goroutine, with the caller's time: op=allow is
// BenchmarkHotKey's clock=at case, op=reserve is ReserveAt (admitted, never
// cancelled), op=reserve+cancel a ReserveAt and its Cancel. As in
// BenchmarkHotKey, the counters run at the largest limit and the log moves
// W/L per request.
func BenchmarkReserveCancel(b *testing.B) {
	for _, alg := range allAlgorithms {
		limit, step := int64(engine.MaxLimit), time.Duration(0)
		if alg == engine.SlidingLog {
			limit = engine.DefaultMaxLogLimit
			step = time.Second / time.Duration(limit)
		}
		for _, op := range []string{"allow", "reserve", "reserve+cancel"} {
			b.Run("alg="+alg.String()+"/op="+op, func(b *testing.B) {
				e := newEngine(b, engine.Config{Limit: limit, Window: time.Second, Algorithm: alg, DisableEviction: true})
				e.AllowAt("hot-key", 1, t0)
				b.ReportAllocs()
				now := t0
				for b.Loop() {
					now = now.Add(step)
					switch op {
					case "allow":
						sinkDecision = e.AllowAt("hot-key", 1, now)
					case "reserve":
						r := e.ReserveAt("hot-key", 1, now)
						sinkDecision = r.Decision()
					default:
						r := e.ReserveAt("hot-key", 1, now)
						sinkOK = r.Cancel()
					}
				}
			})
		}
	}
}

// BenchmarkSettle puts Settle and ChargeAt next to AllowAt on one existing
// key, one goroutine, with the caller's time: op=allow is the baseline and
// op=reserve a ReserveAt alone (never settled), so that a settle's own
// cost is its case less op=reserve; op=reserve+settle-fewer reserves 2
// units and settles to 1 (one goes
// back); op=reserve+settle-more reserves 1 and settles to 2 (a debt of
// one); op=charge is ChargeAt of 1. Each Settle and ChargeAt also computes
// the Decision one more unit would get. The counters run at the largest
// limit; the log moves W/L per unit recorded, so that it stays at its
// limit and never needs a larger allocation.
func BenchmarkSettle(b *testing.B) {
	for _, alg := range allAlgorithms {
		limit := int64(engine.MaxLimit)
		if alg == engine.SlidingLog {
			limit = engine.DefaultMaxLogLimit
		}
		for _, op := range []string{"allow", "reserve", "reserve+settle-fewer", "reserve+settle-more", "charge"} {
			b.Run("alg="+alg.String()+"/op="+op, func(b *testing.B) {
				e := newEngine(b, engine.Config{Limit: limit, Window: time.Second, Algorithm: alg, DisableEviction: true})
				e.AllowAt("hot-key", 1, t0)
				step := time.Duration(0)
				if alg == engine.SlidingLog {
					step = 2 * time.Second / time.Duration(limit) // at most 2 units per op
				}
				b.ReportAllocs()
				now := t0
				for b.Loop() {
					now = now.Add(step)
					switch op {
					case "allow":
						sinkDecision = e.AllowAt("hot-key", 1, now)
					case "reserve":
						r := e.ReserveAt("hot-key", 1, now)
						sinkDecision = r.Decision()
					case "reserve+settle-fewer":
						r := e.ReserveAt("hot-key", 2, now)
						sinkDecision, _ = r.SettleAt(1, now)
					case "reserve+settle-more":
						r := e.ReserveAt("hot-key", 1, now)
						sinkDecision, _ = r.SettleAt(2, now)
					default:
						sinkDecision, _ = e.ChargeAt("hot-key", 1, now)
					}
				}
			})
		}
	}
}

// BenchmarkAllowAll asks one unit of one key from three engines (per
// second, per minute, per hour): op=allow×3 is three AllowAt calls, the
// baseline without all-or-nothing; op=all is AllowAll, admitted;
// op=all-refused is AllowAll refused by the third engine, which cancels the
// first two reservations.
func BenchmarkAllowAll(b *testing.B) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingLog} {
		limit := int64(engine.MaxLimit)
		if alg == engine.SlidingLog {
			limit = engine.DefaultMaxLogLimit
		}
		for _, op := range []string{"allow×3", "all", "all-refused"} {
			b.Run("alg="+alg.String()+"/op="+op, func(b *testing.B) {
				var es [3]*engine.Engine
				for i, w := range []time.Duration{time.Second, time.Minute, time.Hour} {
					l := limit
					if i == 2 && op == "all-refused" {
						l = 1
					}
					es[i] = newEngine(b, engine.Config{Limit: l, Window: w, Algorithm: alg, DisableEviction: true})
					es[i].AllowAt("hot-key", 1, t0)
				}
				reqs := []engine.Request{{Engine: es[0], Key: "hot-key", N: 1}, {Engine: es[1], Key: "hot-key", N: 1}, {Engine: es[2], Key: "hot-key", N: 1}}
				b.ReportAllocs()
				// The log keeps a timestamp per unit: step its time as
				// BenchmarkHotKey does, so that it stays at its limit
				// rather than refusing every admitted case.
				step := time.Duration(0)
				if alg == engine.SlidingLog && op != "all-refused" {
					step = time.Hour / time.Duration(limit)
				}
				now := t0
				for b.Loop() {
					now = now.Add(step)
					if op == "allow×3" {
						sinkOK = es[0].AllowAt("hot-key", 1, now).Allowed && es[1].AllowAt("hot-key", 1, now).Allowed && es[2].AllowAt("hot-key", 1, now).Allowed
						continue
					}
					_, sinkDecision = engine.AllowAll(now, reqs...)
				}
			})
		}
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
