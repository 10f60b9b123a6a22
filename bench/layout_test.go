package bench_test

import (
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// BenchmarkLayout measures what the engine's keys cost the heap: bytes per
// key including the key's own bytes (each key is inserted as a string of
// its own, as a server's request key is, so a layout that kept the caller's
// string would be charged for it), heap objects and GC-scannable bytes per
// key, and the time of one forced GC with the keys live. N = 10, with
// DisableEviction. Cases: the algorithms at 1M keys "user:0" … (6 to 11
// bytes), and the sliding window at 100k; the sliding window at 1M keys
// of fixed lengths, across the 64-byte steps of the state's size (15
// bytes fit 128, 16 … 79 take 192); 1M keys in a table presized for
// them (Config.ExpectedKeys); and 10M keys. cmd/peergc in bench/peers compares the same figures with
// the layout before issue 10 and with sethvargo/go-limiter in one process.
func BenchmarkLayout(b *testing.B) {
	type layoutCase struct {
		name   string
		alg    engine.Algorithm
		perKey bool
		keys   int
		keyLen int   // 0: "user:N"
		expect int64 // Config.ExpectedKeys
	}
	cases := []layoutCase{
		{"alg=sliding/keys=1e5", engine.SlidingWindow, false, 100_000, 0, 0},
		{"alg=sliding/keys=1e6", engine.SlidingWindow, false, 1_000_000, 0, 0},
		{"alg=sliding/keys=1e6/expected=1e6", engine.SlidingWindow, false, 1_000_000, 0, 1_000_000},
		{"alg=sliding/per-key-limits/keys=1e6", engine.SlidingWindow, true, 1_000_000, 0, 0},
		{"alg=strict/keys=1e6", engine.SlidingWindowStrict, false, 1_000_000, 0, 0},
		{"alg=fixed/keys=1e6", engine.FixedWindow, false, 1_000_000, 0, 0},
		{"alg=token/keys=1e6", engine.TokenBucket, false, 1_000_000, 0, 0},
	}
	for _, n := range []int{8, 15, 16, 36, 79, 80} {
		cases = append(cases, layoutCase{"alg=sliding/keys=1e6/key-bytes=" + strconv.Itoa(n), engine.SlidingWindow, false, 1_000_000, n, 0})
	}
	cases = append(cases, layoutCase{"alg=sliding/keys=1e7", engine.SlidingWindow, false, 10_000_000, 0, 0})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if c.keys > 1_000_000 && testing.Short() {
				b.Skip("10M keys need several GB; skipped with -short")
			}
			keys := layoutKeys(c.keys, c.keyLen)
			m0 := readGCMetrics()
			e, err := engine.New(engine.Config{Limit: 100, Window: time.Second, SubWindows: 10, Algorithm: c.alg, PerKeyLimits: c.perKey, DisableEviction: true, ExpectedKeys: c.expect})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			for _, k := range keys {
				e.AllowAt(strings.Clone(k), 1, benchT0)
			}
			m1 := readGCMetrics()
			start := time.Now()
			runtime.GC()
			gc := time.Since(start)
			for b.Loop() {
			}
			n := float64(c.keys)
			b.ReportMetric(float64(m1.heap-m0.heap)/n, "B/key")
			b.ReportMetric(float64(m1.scan-m0.scan)/n, "scan-B/key")
			b.ReportMetric(float64(m1.objects-m0.objects)/n, "objects/key")
			b.ReportMetric(float64(gc.Milliseconds()), "gc-ms")
			runtime.KeepAlive(e)
			runtime.KeepAlive(keys)
		})
	}
}

// layoutKeys returns n distinct keys: "user:N", or of exactly keyLen bytes
// (the number, zero-padded on the left).
func layoutKeys(n, keyLen int) []string {
	if keyLen == 0 {
		return benchKeys(n)
	}
	keys := make([]string, n)
	for i := range keys {
		s := strconv.Itoa(i)
		keys[i] = strings.Repeat("0", keyLen-len(s)) + s
	}
	return keys
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
