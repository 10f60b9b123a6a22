package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/ringlimit/ringlimit/bench/internal/accuracy"
)

// The files -mode accuracy writes into -out.
const (
	accuracyMD  = "accuracy.md"
	accuracySVG = "accuracy.svg"
)

// accuracyCommand is the command the report says regenerates it, less
// -quick and -out (added as given). Without -out it writes into the
// current directory: a user's run never edits the repository's docs/.
const accuracyCommand = "go run ./bench/cmd/ringbench -mode accuracy"

// accuracyOnlyFlags apply only to -mode accuracy; loadOnlyFlags only to
// -mode load. -seed and -window serve both.
var (
	accuracyOnlyFlags = []string{"out", "limit", "quick"}
	loadOnlyFlags     = []string{"tenants", "duration", "algorithm", "subwindows", "workers", "clock", "zipf",
		"cpuprofile", "memprofile", "pprof", "json", "sample", "live-audit"}
)

// checkAccuracyFlags validates the flags of -mode accuracy; set holds the
// names of the flags given.
func checkAccuracyFlags(o *options, set map[string]bool) error {
	for _, name := range loadOnlyFlags {
		if set[name] {
			return usagef("-%s applies only to -mode load", name)
		}
	}
	if o.limit < 1 || o.limit > accuracy.MaxLimit {
		return usagef("-limit = %d, want 1 … %d", o.limit, accuracy.MaxLimit)
	}
	if o.out == "" {
		return usagef("-out is empty, want a directory")
	}
	if !set["window"] {
		o.window = accuracy.DefaultWindow
	}
	if o.window <= 0 {
		return usagef("-window = %v, want > 0", o.window)
	}
	for _, n := range accuracy.DefaultSubWindows {
		if int64(o.window)%int64(n) != 0 {
			return usagef("-window = %v cannot be cut into %d sub-windows of whole nanoseconds (the lab compares N = %v); "+
				"want a window divisible by 60 ns, e.g. the default %v", o.window, n, accuracy.DefaultSubWindows, accuracy.DefaultWindow)
		}
	}
	return nil
}

func (o options) accuracyConfig() accuracy.Config {
	c := accuracy.DefaultConfig()
	if o.quick {
		c = accuracy.QuickConfig()
	}
	c.Limit, c.Window, c.Seed = o.limit, o.window, uint64(o.seed)
	return c
}

// runAccuracy runs the lab, writes the report and the chart into o.out and
// prints the summary table; it returns the exit status.
func runAccuracy(o options, stdout, stderr io.Writer) int {
	res, err := accuracy.Run(o.accuracyConfig(), stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ringbench:", err)
		return 1
	}
	cmd := accuracyCommand
	if o.quick {
		cmd += " -quick"
	}
	if o.out != "." {
		cmd += " -out " + o.out
	}
	md := res.Markdown(accuracy.CurrentMeta(cmd), accuracySVG)
	svg := res.Figure().SVG()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintln(stderr, "ringbench: -out:", err)
		return 1
	}
	for name, data := range map[string][]byte{accuracyMD: []byte(md), accuracySVG: svg} {
		if err := os.WriteFile(filepath.Join(o.out, name), data, 0o644); err != nil {
			fmt.Fprintln(stderr, "ringbench: -out:", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "accuracy lab: L = %d per W = %v, seed %d, %s\n\n", o.limit, o.window, o.seed, res.Elapsed.Round(time.Millisecond))
	if res.LogNote != "" {
		fmt.Fprintf(stdout, "note: %s\n\n", res.LogNote)
	}
	fmt.Fprint(stdout, res.Table())
	fmt.Fprintf(stdout, "\nwrote %s and %s\n", filepath.Join(o.out, accuracyMD), filepath.Join(o.out, accuracySVG))
	return 0
}
