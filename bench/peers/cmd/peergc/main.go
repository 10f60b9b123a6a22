// Command peergc measures, in one process, what holding many keys costs the
// heap and the garbage collector: ringlimit's layout (one pointer-free
// state per key holding the key's bytes; and with Config.ExpectedKeys
// 1,000,000, its slab sized from the start), a replica of its layout before
// issue 10 (peers.OldLayout: a map entry with the caller's string and a
// separate 96-byte ring) and sethvargo/go-limiter's memorystore.
//
//	go run ./cmd/peergc                  # 1M and 10M keys, 5 s of load each
//	go run ./cmd/peergc -keys 1000000 -load 2s
//
// For each limiter and key count it builds the keys, each inserted with a
// string of its own (a copy, as a server's request key is), so that bytes
// per key include the key's bytes where the limiter keeps them. Then it
// reports the live heap per key, heap objects per key, the GC-scannable
// bytes per key, the time of a forced GC (median of three), and, under a
// load of GOMAXPROCS goroutines that each also allocate garbage per
// request (a stand-in for a server's per-request allocations, so that the
// collector runs), the share of CPU time the GC took and its cycles. The
// load lasts at least -load and until -cycles collections have run, since
// with a large live heap they come seconds apart.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/bench/peers"
	"github.com/ringlimit/ringlimit/engine"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peergc:", err)
		os.Exit(2)
	}
}

type kind struct {
	name string
	make func() peers.Limiter
}

var kinds = []kind{
	{"ringlimit", func() peers.Limiter {
		e, err := engine.New(engine.Config{Limit: 100_000_000_000, Window: time.Hour, DisableEviction: true})
		if err != nil {
			panic(err)
		}
		return ringlimit{e}
	}},
	{"ringlimit, ExpectedKeys 1,000,000", func() peers.Limiter {
		e, err := engine.New(engine.Config{Limit: 100_000_000_000, Window: time.Hour, DisableEviction: true, ExpectedKeys: 1_000_000})
		if err != nil {
			panic(err)
		}
		return ringlimit{e}
	}},
	{"ringlimit-before-issue-10 (replica)", func() peers.Limiter { return peers.NewOldLayout() }},
	{"sethvargo", func() peers.Limiter {
		for _, p := range peers.Peers {
			if p.Name == "sethvargo" {
				return p.New(100_000_000_000, time.Hour)
			}
		}
		panic("no sethvargo peer")
	}},
}

type ringlimit struct{ e *engine.Engine }

func (l ringlimit) Allow(key string) bool { return l.e.Allow(key) }
func (l ringlimit) Close()                { l.e.Close() }

type row struct {
	kind                    string
	keys                    int
	bytes, objects, scan    float64
	gcMs                    float64
	gcShare, nsOp, cyclesPS float64
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peergc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keysFlag := fs.String("keys", "1000000,10000000", "key counts, comma-separated")
	load := fs.Duration("load", 5*time.Second, "the least load phase per limiter and key count; it goes on until -cycles GC cycles have run (at most 3 minutes)")
	cycles := fs.Int("cycles", 3, "GC cycles the load phase waits for")
	garbage := fs.Int("garbage", 256, "bytes of garbage each request allocates during the load")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var counts []int
	for _, s := range strings.Split(*keysFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-keys: %q is not a key count", s)
		}
		counts = append(counts, n)
	}
	var rows []row
	for _, n := range counts {
		keys := peers.KeySet(n)
		for _, k := range kinds {
			r := measure(k, keys, *load, *cycles, *garbage)
			fmt.Fprintf(stderr, "%s, %d keys: %.1f B/key, %.2f objects/key, forced GC %.0f ms, GC %.1f%% of CPU under load\n", r.kind, n, r.bytes, r.objects, r.gcMs, 100*r.gcShare)
			rows = append(rows, r)
		}
	}
	fmt.Fprintf(stdout, "%s, %s, GOMAXPROCS %d, %s; load: at least %v and %d GC cycles per row, %d B of garbage per request (its time is in ns/request).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.GOMAXPROCS(0), cpuName(), *load, *cycles, *garbage)
	fmt.Fprintf(stdout, "| layout | keys | B/key (with the key's bytes) | heap objects/key | GC-scannable B/key | one forced GC | GC share of CPU under load | GC cycles/s | ns/request under load |\n")
	fmt.Fprintf(stdout, "|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(stdout, "| %s | %s | %.1f | %.2f | %.1f | %.0f ms | %.1f%% | %.2f | %.0f |\n",
			r.kind, label(r.keys), r.bytes, r.objects, r.scan, r.gcMs, 100*r.gcShare, r.cyclesPS, r.nsOp)
	}
	return nil
}

func label(n int) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n%1_000 == 0:
		return strconv.Itoa(n/1_000) + "k"
	}
	return strconv.Itoa(n)
}

func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(ln, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v) + fmt.Sprintf(", %d CPUs", runtime.NumCPU())
		}
	}
	return runtime.GOARCH
}

var names = []string{
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/objects:objects",
	"/gc/scan/heap:bytes",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/gc/cycles/total:gc-cycles",
}

func read() []float64 {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	out := make([]float64, len(s))
	for i, x := range s {
		switch x.Value.Kind() {
		case metrics.KindUint64:
			out[i] = float64(x.Value.Uint64())
		case metrics.KindFloat64:
			out[i] = x.Value.Float64()
		}
	}
	return out
}

var sink atomic.Pointer[[]byte]

func measure(k kind, keys []string, load time.Duration, cycles, garbage int) row {
	runtime.GC()
	runtime.GC()
	m0 := read()
	lim := k.make()
	for _, key := range keys {
		lim.Allow(strings.Clone(key)) // a string of its own, as a request's key is
	}
	runtime.GC()
	runtime.GC()
	m1 := read()
	n := float64(len(keys))
	r := row{kind: k.name, keys: len(keys), bytes: (m1[0] - m0[0]) / n, objects: (m1[1] - m0[1]) / n, scan: (m1[2] - m0[2]) / n}
	var gcs []float64
	for range 3 {
		t := time.Now()
		runtime.GC()
		gcs = append(gcs, float64(time.Since(t).Microseconds())/1000)
	}
	slices.Sort(gcs)
	r.gcMs = gcs[1]

	// The load: uniform keys from every P, each request also allocating.
	a := read()
	var stop atomic.Bool
	var ops atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := uint64(w)*0x9e3779b97f4a7c15 | 1
			var o int64
			for !stop.Load() {
				for range 64 {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					lim.Allow(keys[(x>>32)*uint64(len(keys))>>32])
					b := make([]byte, garbage)
					sink.Store(&b)
				}
				o += 64
			}
			ops.Add(o)
		}()
	}
	time.Sleep(load)
	for deadline := start.Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c := read(); c[5]-a[5] >= float64(cycles) {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	el := time.Since(start)
	b := read()
	if cpu := b[4] - a[4]; cpu > 0 {
		r.gcShare = (b[3] - a[3]) / cpu
	}
	r.cyclesPS = (b[5] - a[5]) / el.Seconds()
	r.nsOp = float64(el.Nanoseconds()) * float64(runtime.GOMAXPROCS(0)) / float64(ops.Load())
	lim.Close()
	runtime.KeepAlive(lim)
	return r
}
