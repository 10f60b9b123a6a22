// Command peerbench runs the interleaved peer comparison (peers.Interleave)
// and writes its samples as JSON, or renders one or two such runs as the
// Markdown of RESULTS.md.
//
//	go run ./cmd/peerbench -rounds 15 -o out/run1.json   # measure
//	go run ./cmd/peerbench -report out/run1.json,out/run2.json
//
// Every limiter of a scenario is built first; then the limiters run in
// rotation, one timed run each per round. The report gives, per cell, the
// median of the per-round ratios of its ns/op to the reference peer's, with
// their min and max, and the targets of issue 10 as ratios of the same kind.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bench/peers"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rounds := fs.Int("rounds", 15, "rounds of the rotation (≥ 1)")
	cell := fs.Duration("cell", 100*time.Millisecond, "target time of one limiter's timed run per round")
	only := fs.String("peers", "", "regexp: run only the peers (and floors) whose name matches")
	scen := fs.String("scenarios", "", "regexp: run only the scenarios whose name matches")
	short := fs.Bool("short", false, "leave out the 1M-key scenario")
	out := fs.String("o", "", "write the samples as JSON to this file (default: stdout)")
	report := fs.String("report", "", "render RESULTS.md sections from these sample files (comma-separated, one or two) instead of measuring")
	ref := fs.String("ref", "sethvargo", "the reference peer of the ratio tables")
	prefix := fs.String("keyprefix", peers.DefaultKeyPrefix, "the keys' prefix (keys are prefix+N): a longer one measures longer keys")
	cpu := fs.Bool("cpu", false, "time cells by the process's CPU time instead of the wall clock (a loaded machine; see peers.InterleaveConfig.CPUTime)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *report != "" {
		return render(strings.Split(*report, ","), *ref, stdout)
	}
	if *rounds < 1 || *cell <= 0 {
		return fmt.Errorf("-rounds must be ≥ 1 and -cell > 0")
	}
	cfg := peers.InterleaveConfig{
		Rounds:    *rounds,
		CellTime:  *cell,
		Limit:     100_000_000_000, // per hour: everything is admitted (see bench_test.go)
		Window:    time.Hour,
		CPUTime:   *cpu,
		KeyPrefix: *prefix,
		Logf:      func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) },
	}
	pre, err := regexp.Compile(*only)
	if err != nil {
		return fmt.Errorf("-peers: %w", err)
	}
	sre, err := regexp.Compile(*scen)
	if err != nil {
		return fmt.Errorf("-scenarios: %w", err)
	}
	for _, p := range append(slices.Clone(peers.Peers), peers.Floors...) {
		if pre.MatchString(p.Name) {
			cfg.Peers = append(cfg.Peers, p)
		}
	}
	for _, sc := range append(slices.Clone(peers.Scenarios), peers.DistinctScenarios...) {
		if sre.MatchString(sc.Name) && !(*short && sc.Keys >= 1_000_000) {
			cfg.Scenarios = append(cfg.Scenarios, sc)
		}
	}
	s, err := peers.Interleave(cfg)
	if err != nil {
		return err
	}
	s.Machine = machine()
	s.Go = runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	s.Date = time.Now().UTC().Format("2006-01-02 15:04 UTC")
	s.Command = "peerbench " + strings.Join(args, " ")
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(s)
}

// machine names the CPU and its count, from /proc/cpuinfo where there is one.
func machine() string {
	name := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, ln := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(ln, ":"); ok && strings.TrimSpace(k) == "model name" {
				name = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		name += ", Linux " + strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("%s, %d CPUs", name, runtime.NumCPU())
}

func load(path string) (*peers.Samples, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := new(peers.Samples)
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// target is one comparison the issue sets, as a ratio of medians of
// per-round ratios: peer's ns/op over ref's (ref "best": the fastest peer
// that is neither ringlimit nor a floor, per round).
type target struct {
	what     string
	peer     string
	ref      string
	scenario string
	max      float64 // 0: for information
}

var targets = []target{
	{"1M keys, sliding, default clock", "ringlimit-sliding", "sethvargo", "1M-parallel", 0.7},
	{"1M keys, sliding, default clock", "ringlimit-sliding", "xrate-xsync", "1M-parallel", 0.7},
	{"1M keys, sliding, coarse clock", "ringlimit-sliding-coarse", "sethvargo", "1M-parallel", 0.7},
	{"1M keys, sliding, coarse clock", "ringlimit-sliding-coarse", "xrate-xsync", "1M-parallel", 0.7},
	{"1M keys, strict, default clock", "ringlimit-strict", "sethvargo", "1M-parallel", 0.7},
	{"1M keys, strict, default clock", "ringlimit-strict", "xrate-xsync", "1M-parallel", 0.7},
	{"1M keys, strict, coarse clock", "ringlimit-strict-coarse", "sethvargo", "1M-parallel", 0.7},
	{"1M keys, strict, coarse clock", "ringlimit-strict-coarse", "xrate-xsync", "1M-parallel", 0.7},
	{"1M keys, fixed, default clock", "ringlimit-fixed", "sethvargo", "1M-parallel", 0},
	{"1M keys as distinct strings, sliding, default clock", "ringlimit-sliding", "sethvargo", "1M-distinct", 0.7},
	{"1M keys as distinct strings, sliding, default clock", "ringlimit-sliding", "xrate-xsync", "1M-distinct", 0.7},
	{"1M keys as distinct strings, sliding, coarse clock", "ringlimit-sliding-coarse", "sethvargo", "1M-distinct", 0.7},
	{"1M keys as distinct strings, sliding, default clock", "ringlimit-sliding", "floor-sum11", "1M-distinct", 0},
	{"1M keys, sliding, AllowAt", "ringlimit-sliding-at", "floor-add", "1M-parallel", 0},
	{"1M keys, sliding, AllowAt", "ringlimit-sliding-at", "floor-sum11", "1M-parallel", 0},
	{"1M keys, sliding, default clock", "ringlimit-sliding", "floor-sum11", "1M-parallel", 0},
	{"1k keys, sliding, default clock", "ringlimit-sliding", "best", "1k-parallel", 0.5},
	{"1k keys, sliding, coarse clock", "ringlimit-sliding-coarse", "best", "1k-parallel", 0.5},
	{"hot key serial, sliding, default clock", "ringlimit-sliding", "best", "hot-serial", 0.5},
	{"hot key serial, sliding, coarse clock", "ringlimit-sliding-coarse", "best", "hot-serial", 0.5},
	{"hot key parallel, sliding, default clock", "ringlimit-sliding", "best", "hot-parallel", 0.5},
	{"hot key parallel, sliding, coarse clock", "ringlimit-sliding-coarse", "best", "hot-parallel", 0.5},
	{"hot key serial, AllowAt with Remaining", "ringlimit-sliding-at", "floor-sum11", "hot-serial", 1.25},
	{"hot key serial, Allow on the coarse clock", "ringlimit-sliding-coarse", "floor-sum11", "hot-serial", 1.1},
}

// ratio is a target's spread in s, and the best peer's name for ref "best".
func (t target) ratio(s *peers.Samples) (peers.Spread, string, bool) {
	if !slices.Contains(s.Peers, t.peer) || !slices.Contains(s.Scenarios, t.scenario) {
		return peers.Spread{}, "", false
	}
	if t.ref != "best" {
		if !slices.Contains(s.Peers, t.ref) {
			return peers.Spread{}, "", false
		}
		return s.Ratio(t.peer, t.ref, t.scenario), t.ref, true
	}
	var others []string
	for _, p := range s.Peers {
		if !strings.HasPrefix(p, "ringlimit") && !s.IsFloor(p) {
			others = append(others, p)
		}
	}
	if len(others) == 0 {
		return peers.Spread{}, "", false
	}
	sp, who := s.RatioToBest(t.peer, others, t.scenario)
	return sp, who, true
}

func fr(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func fns(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func render(paths []string, ref string, w io.Writer) error {
	if len(paths) < 1 || len(paths) > 2 {
		return fmt.Errorf("-report takes one or two sample files")
	}
	var runs []*peers.Samples
	for _, p := range paths {
		s, err := load(p)
		if err != nil {
			return err
		}
		runs = append(runs, s)
	}
	a := runs[0]
	var b *peers.Samples
	if len(runs) == 2 {
		b = runs[1]
	}
	if !slices.Contains(a.Peers, ref) {
		return fmt.Errorf("reference peer %q is not in %s", ref, paths[0])
	}
	fmt.Fprintf(w, "Run A: %s, %s, %s, `%s` (%d rounds, %s per cell).\n", a.Date, a.Machine, a.Go, a.Command, a.Rounds, a.CellTime)
	if b != nil {
		fmt.Fprintf(w, "Run B: %s, %s, %s, `%s` (%d rounds, %s per cell).\n", b.Date, b.Machine, b.Go, b.Command, b.Rounds, b.CellTime)
	}
	fmt.Fprintln(w)

	goalTable(a, w)
	if b != nil {
		fmt.Fprintf(w, "Run B:\n\n")
		goalTable(b, w)
	}

	// The targets.
	fmt.Fprintf(w, "### Targets (issue 10): median of per-round ratios of ns/op [min–max]\n\n")
	fmt.Fprintf(w, "Ratio = ringlimit's time over the reference's, below 1 is faster. \"best peer\" is, per round, the fastest of the peers that are neither ringlimit nor a floor.\n\n")
	if b != nil {
		fmt.Fprintf(w, "| case | against | target | run A | run B | met |\n|---|---|--:|--:|--:|---|\n")
	} else {
		fmt.Fprintf(w, "| case | against | target | run A | met |\n|---|---|--:|--:|---|\n")
	}
	for _, t := range targets {
		sa, who, ok := t.ratio(a)
		if !ok {
			continue
		}
		against := t.ref
		if t.ref == "best" {
			against = "best peer (mostly " + who + ")"
		}
		goal, met := "–", "info"
		if t.max > 0 {
			goal = "≤ " + fr(t.max)
			met = "yes"
			if sa.Median > t.max {
				met = "no"
			}
		}
		row := fmt.Sprintf("| %s (%s) | %s | %s | %s [%s–%s] |", t.what, t.peer, against, goal, fr(sa.Median), fr(sa.Min), fr(sa.Max))
		if b != nil {
			if sb, _, ok := t.ratio(b); ok {
				row += fmt.Sprintf(" %s [%s–%s] |", fr(sb.Median), fr(sb.Min), fr(sb.Max))
				if t.max > 0 && (sb.Median > t.max) != (sa.Median > t.max) {
					met = "A " + met + ", B " + map[bool]string{true: "no", false: "yes"}[sb.Median > t.max]
				}
			} else {
				row += " – |"
			}
		}
		fmt.Fprintf(w, "%s %s |\n", row, met)
	}
	fmt.Fprintln(w)

	// Every cell against the reference.
	fmt.Fprintf(w, "### Every limiter against %s: median of per-round ratios [min–max]", ref)
	if b != nil {
		fmt.Fprintf(w, ", then run B's median")
	}
	fmt.Fprintf(w, "\n\n| limiter |")
	for _, sc := range a.Scenarios {
		fmt.Fprintf(w, " %s |", sc)
	}
	fmt.Fprintf(w, "\n|---|")
	for range a.Scenarios {
		fmt.Fprintf(w, "--:|")
	}
	fmt.Fprintln(w)
	for _, p := range a.Peers {
		fmt.Fprintf(w, "| %s |", p)
		for _, sc := range a.Scenarios {
			r := a.Ratio(p, ref, sc)
			cell := fmt.Sprintf("%s [%s–%s]", fr(r.Median), fr(r.Min), fr(r.Max))
			if b != nil && slices.Contains(b.Peers, p) && slices.Contains(b.Scenarios, sc) {
				cell += " · " + fr(b.Ratio(p, ref, sc).Median)
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)

	// ns/op, noisy.
	fmt.Fprintf(w, "### ns/op, median of the rounds [min–max] (noisy: absolute times on a shared machine; read the ratios above)\n\n")
	fmt.Fprintf(w, "| limiter | allocs/op |")
	for _, sc := range a.Scenarios {
		fmt.Fprintf(w, " %s |", sc)
	}
	fmt.Fprintf(w, "\n|---|--:|")
	for range a.Scenarios {
		fmt.Fprintf(w, "--:|")
	}
	fmt.Fprintln(w)
	for _, p := range a.Peers {
		allocs := 0.0
		for _, sc := range a.Scenarios {
			allocs = max(allocs, a.Allocs[peers.CellKey(p, sc)])
		}
		fmt.Fprintf(w, "| %s | %.1f |", p, allocs)
		for _, sc := range a.Scenarios {
			n := a.Ns(p, sc)
			note := ""
			if ad := a.Admitted[peers.CellKey(p, sc)]; !a.IsFloor(p) && ad < 0.999 {
				note = fmt.Sprintf(" (admitted %.3f)", ad)
			}
			fmt.Fprintf(w, " %s [%s–%s]%s |", fns(n.Median), fns(n.Min), fns(n.Max), note)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)

	if b != nil {
		closeness(a, b, ref, w)
	}
	return nil
}

// closeness reports how far run B's median ratios are from run A's, over
// every cell and over the targets.
func closeness(a, b *peers.Samples, ref string, w io.Writer) {
	var all []float64
	worst, worstCell := 0.0, ""
	for _, p := range a.Peers {
		if p == ref || !slices.Contains(b.Peers, p) {
			continue
		}
		for _, sc := range a.Scenarios {
			if !slices.Contains(b.Scenarios, sc) {
				continue
			}
			ra, rb := a.Ratio(p, ref, sc).Median, b.Ratio(p, ref, sc).Median
			d := math.Abs(rb/ra - 1)
			all = append(all, d)
			if d > worst {
				worst, worstCell = d, p+" in "+sc
			}
		}
	}
	var tg []float64
	for _, t := range targets {
		sa, _, ok1 := t.ratio(a)
		sb, _, ok2 := t.ratio(b)
		if ok1 && ok2 {
			tg = append(tg, math.Abs(sb.Median/sa.Median-1))
		}
	}
	if len(all) == 0 {
		return
	}
	ma, mt := spreadOf(all), spreadOf(tg)
	fmt.Fprintf(w, "### How close the two runs came\n\n")
	fmt.Fprintf(w, "Over the %d cells of the table against %s, run B's median ratio differs from run A's by %.0f%% at the median and %.0f%% at most (%s).", len(all), ref, 100*ma[0], 100*ma[1], worstCell)
	if len(tg) > 0 {
		fmt.Fprintf(w, " Over the %d target ratios: %.0f%% at the median, %.0f%% at most.", len(tg), 100*mt[0], 100*mt[1])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
}

// spreadOf returns the median and the max of v.
func spreadOf(v []float64) [2]float64 {
	if len(v) == 0 {
		return [2]float64{math.NaN(), math.NaN()}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return [2]float64{m, s[len(s)-1]}
}
