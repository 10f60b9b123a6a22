// Command ringbench runs a multi-tenant load on the embedded engine and
// reports throughput, sampled latency, per-tier outcomes, memory per key, GC
// pauses and an accuracy audit against an exact sliding log (-mode load,
// the default); or it runs the accuracy lab (-mode accuracy), which replays
// synthetic traffic through every algorithm, compares it with an exact
// sliding log and writes accuracy.md and accuracy.svg into the current
// directory, or -out (docs/ holds the published copy).
//
//	go run ./bench/cmd/ringbench                      # 100,000 tenants, 10 s
//	go run ./bench/cmd/ringbench -duration 2s -json   # one JSON object on stdout
//	go run ./bench/cmd/ringbench -mode accuracy -out docs   # regenerates docs/accuracy.{md,svg}
//
// Progress goes to stderr once a second; the report goes to stdout. Exit
// status: 0 after a run (Ctrl-C ends it early and still reports), 1 on a
// runtime failure, 2 on a bad flag or engine configuration.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"time"

	"github.com/ringlimit/ringlimit/bench/internal/accuracy"
	"github.com/ringlimit/ringlimit/engine"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Bounds of the flags.
const (
	maxTenants = 10_000_000
	maxSample  = 10_000
)

// options are the parsed and validated flags.
type options struct {
	mode string // "load" or "accuracy"

	// accuracy mode
	out   string
	limit int64
	quick bool

	// load mode (seed and window serve both)
	tenants    int
	duration   time.Duration
	alg        engine.Algorithm
	window     time.Duration
	subWindows int
	workers    int
	coarse     bool
	zipf       float64
	cpuProfile string
	memProfile string
	pprofAddr  string
	json       bool
	seed       int64
	sample     int
	liveAudit  float64
}

// usageError is a bad flag or configuration: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// parseFlags parses and validates args. A returned usageError names the flag
// and its allowed range; flag.ErrHelp means -h.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("ringbench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by run; -h prints the usage below
	fs.IntVar(&o.tenants, "tenants", 100_000, "number of tenants (keys), 1 … "+commas(maxTenants))
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of the load run, > 0")
	alg := fs.String("algorithm", "sliding", "sliding, strict or fixed")
	fs.DurationVar(&o.window, "window", time.Second, "window length, > 0; the tiers' limits are per window (accuracy mode: default 1.2s, and a multiple of 60 ns)")
	fs.IntVar(&o.subWindows, "subwindows", engine.DefaultSubWindows, fmt.Sprintf("sub-windows per window, 1 … %d, dividing -window into whole nanoseconds", engine.MaxSubWindows))
	fs.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "load goroutines, ≥ 1")
	clk := fs.String("clock", "precise", "engine clock: precise or coarse (1ms cached clock)")
	fs.Float64Var(&o.zipf, "zipf", 1.1, "Zipf exponent s of tenant popularity, > 1")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the load run to `file`")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile at the end, after a GC, to `file`")
	fs.StringVar(&o.pprofAddr, "pprof", "", "serve net/http/pprof on `addr` while running (loopback only: 127.0.0.1, ::1 or localhost)")
	fs.BoolVar(&o.json, "json", false, "print the report as one JSON object")
	fs.Int64Var(&o.seed, "seed", 1, "seed of the tenant permutation and the workers' generators")
	fs.IntVar(&o.sample, "sample", 64, fmt.Sprintf("tenants audited against an exact sliding log, 0 … %d (at most -tenants)", maxSample))
	fs.Float64Var(&o.liveAudit, "live-audit", 0.001, "share of tenants the engine's self-audit (Config.Audit) shadows, 0 (off) or in (0, 1]; ringbench audits the same tenants offline and reports both")
	fs.StringVar(&o.mode, "mode", "load", "load (the multi-tenant load run) or accuracy (the accuracy lab: writes accuracy.md and accuracy.svg to -out)")
	fs.StringVar(&o.out, "out", ".", "accuracy mode: the directory for accuracy.md and accuracy.svg (docs to regenerate the repository's copy)")
	fs.Int64Var(&o.limit, "limit", 100, fmt.Sprintf("accuracy mode: the limit L per window, 1 … %d", accuracy.MaxLimit))
	fs.BoolVar(&o.quick, "quick", false, "accuracy mode: short patterns and few keys (the same worst cases, less statistics), for tests and CI")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "usage: ringbench [flags]")
			fs.PrintDefaults()
			return o, err
		}
		// The flag package names the flag; -h gives every range.
		return o, usageError{err.Error() + " (ringbench -h lists the flags and their ranges)"}
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q; ringbench takes only flags", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch o.mode {
	case "load":
		for _, name := range accuracyOnlyFlags {
			if set[name] {
				return o, usagef("-%s applies only to -mode accuracy", name)
			}
		}
	case "accuracy":
		err := checkAccuracyFlags(&o, set)
		return o, err
	default:
		return o, usagef("-mode = %q, want load or accuracy", o.mode)
	}
	var err error
	switch {
	case o.tenants < 1 || o.tenants > maxTenants:
		return o, usagef("-tenants = %d, want 1 … %s", o.tenants, commas(maxTenants))
	case o.duration <= 0:
		return o, usagef("-duration = %v, want > 0", o.duration)
	case o.window <= 0:
		return o, usagef("-window = %v, want > 0", o.window)
	case o.subWindows < 1 || o.subWindows > engine.MaxSubWindows:
		return o, usagef("-subwindows = %d, want 1 … %d", o.subWindows, engine.MaxSubWindows)
	case o.workers < 1:
		return o, usagef("-workers = %d, want ≥ 1", o.workers)
	case !(o.zipf > 1) || o.zipf > 1e6: // !(> 1) also refuses NaN
		return o, usagef("-zipf = %v, want > 1 (and ≤ 1e6)", o.zipf)
	case o.sample < 0 || o.sample > maxSample:
		return o, usagef("-sample = %d, want 0 … %d", o.sample, maxSample)
	case !(o.liveAudit >= 0 && o.liveAudit <= 1) || (o.liveAudit > 0 && o.liveAudit < 1e-12): // !(…) also refuses NaN
		return o, usagef("-live-audit = %v, want 0 (off) or a share of tenants in [1e-12, 1]", o.liveAudit)
	}
	if o.alg, err = engine.ParseAlgorithm(*alg); err != nil {
		return o, usagef("-algorithm = %q, want sliding, strict or fixed", *alg)
	}
	if o.alg != engine.FixedWindow && int64(o.window)%int64(o.subWindows) != 0 {
		return o, usagef("-window = %v does not split into -subwindows = %d sub-windows of whole nanoseconds; want a window divisible by %d ns", o.window, o.subWindows, o.subWindows)
	}
	switch *clk {
	case "precise":
	case "coarse":
		o.coarse = true
	default:
		return o, usagef("-clock = %q, want precise or coarse", *clk)
	}
	if o.pprofAddr != "" {
		if err := checkLoopback(o.pprofAddr); err != nil {
			return o, err
		}
	}
	o.sample = min(o.sample, o.tenants)
	return o, nil
}

// checkLoopback accepts host:port with a loopback host only, so that the
// profiling endpoints are never exposed beyond the machine.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("-pprof = %q: %v; want host:port with host 127.0.0.1, ::1 or localhost", addr, err)
	}
	switch host {
	case "127.0.0.1", "::1", "localhost":
		return nil
	}
	return usagef("-pprof = %q: host %q is not loopback; want 127.0.0.1, ::1 or localhost (e.g. -pprof 127.0.0.1:6060)", addr, host)
}

// run is the whole command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "ringbench:", err)
		return 2
	}
	if o.mode == "accuracy" {
		return runAccuracy(o, stdout, stderr)
	}
	rep, err := bench(o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ringbench:", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	if o.json {
		err = writeJSON(stdout, rep)
	} else {
		err = writeText(stdout, rep)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ringbench:", err)
		return 1
	}
	return 0
}

// bench sets up the tenants, the engine and the optional profiles, runs the
// load and assembles the report.
func bench(o options, stderr io.Writer) (*report, error) {
	var cpuFile, memFile *os.File
	var err error
	if o.cpuProfile != "" {
		if cpuFile, err = os.Create(o.cpuProfile); err != nil {
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
		defer cpuFile.Close()
	}
	if o.memProfile != "" {
		if memFile, err = os.Create(o.memProfile); err != nil {
			return nil, fmt.Errorf("-memprofile: %w", err)
		}
		defer memFile.Close()
	}
	if o.pprofAddr != "" {
		stopServer, err := servePprof(o.pprofAddr, stderr)
		if err != nil {
			return nil, err
		}
		defer stopServer()
	}

	p := newPlan(o)
	drawNs := zipfDrawNs(o)
	base := readMem() // after the key table, before the engine

	cfg := engine.Config{
		Limit:      tierLimits[0],
		Window:     o.window,
		SubWindows: o.subWindows,
		Algorithm:  o.alg,
		KeyLimit:   p.tier.keyLimit, // captures the tier table only
	}
	if o.coarse {
		cfg.CoarseClock = time.Millisecond
	}
	if o.liveAudit > 0 {
		// The caps never bind here, so that the live audit covers every
		// sampled decision and can be compared with the offline one; a
		// drop would be reported, not hidden.
		cfg.Audit = o.liveAudit
		cfg.AuditMaxKeys = min(o.tenants, engine.MaxAuditMaxKeys)
		cfg.AuditMaxEntries = engine.MaxAuditMaxEntries
	}
	e, err := engine.New(cfg)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	defer e.Close()
	p.addLive(e)

	// The latency samples and the auditors die with runLoad's result inside
	// loadAndReport; the plan, read before the baseline, stays alive.
	rep, err := loadAndReport(o, p, e, cpuFile, stderr)
	if err != nil {
		return nil, err
	}
	rep.ZipfDrawNs = drawNs
	e.Close() // stop the sweeper, so that the key count holds still
	rep.Keys = keysOf(e.Stats())
	end := readMem()
	rep.Memory = memoryOf(base, end, rep.Keys.Live)
	if memFile != nil {
		if err := writeHeapProfile(memFile); err != nil {
			return nil, fmt.Errorf("-memprofile: %w", err)
		}
	}
	runtime.KeepAlive(e)
	runtime.KeepAlive(p)
	return rep, nil
}

func loadAndReport(o options, p *plan, e *engine.Engine, cpuFile *os.File, stderr io.Writer) (*report, error) {
	res, err := runLoad(o, p, e, cpuFile, stderr)
	if err != nil {
		return nil, err
	}
	r := newReport(o, p, res)
	r.LiveAudit = liveAuditOf(o, p, res.auditors, e.Audit()) // the workers have stopped: Audit drains every decision
	return r, nil
}

// servePprof serves the net/http/pprof handlers on addr (already checked to
// be loopback) until the returned function is called.
func servePprof(addr string, stderr io.Writer) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // returns ErrServerClosed on Close
	fmt.Fprintf(stderr, "ringbench: pprof on http://%s/debug/pprof/\n", ln.Addr())
	return func() { srv.Close() }, nil
}
