package accuracy

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"time"
)

// Meta is what the report says about the run that is not a result: the
// command, the machine and the date. It is the only part of the markdown,
// with the bytes/key and ns/decision columns, that differs between runs
// with the same Config.
type Meta struct {
	Command string
	Machine string
	Date    string
}

// CurrentMeta describes this machine and today, for command.
func CurrentMeta(command string) Meta {
	cpu := cpuModel()
	if cpu == "" {
		cpu = "unknown CPU"
	}
	return Meta{
		Command: command,
		Machine: fmt.Sprintf("%s, %d CPUs, %s/%s, GOMAXPROCS %d, %s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.Version()),
		Date:    time.Now().UTC().Format("2006-01-02"),
	}
}

// cpuModel reads the first "model name" of /proc/cpuinfo, where there is one.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// worstUnits is the most units r admitted in one window over the patterns
// that keep says.
func (r *Row) worstUnits(res *Result, keep func(*Pattern) bool) int64 {
	var u int64
	for i, p := range res.Patterns {
		if keep(p) {
			u = max(u, r.Cells[i].WorstUnits)
		}
	}
	return u
}

// Precision is the mean, over the realistic patterns (Poisson, on/off,
// tenants), of each pattern's share of decisions that differ from the exact
// log, with its false-allow and false-deny parts. Each pattern weighs the
// same, so that the many-tenant pattern's million decisions do not drown
// the others.
func (r *Row) Precision(res *Result) (mismatch, falseAllow, falseDeny float64) {
	return r.meanShares(res, func(c Cell) (int64, int64) { return c.FalseAllows, c.FalseDenies })
}

// EstimateErrors is Precision against an exact limiter holding the
// algorithm's own history (Cell.EstFalseAllows, Cell.EstFalseDenies).
func (r *Row) EstimateErrors(res *Result) (mismatch, falseAllow, falseDeny float64) {
	return r.meanShares(res, func(c Cell) (int64, int64) { return c.EstFalseAllows, c.EstFalseDenies })
}

func (r *Row) meanShares(res *Result, of func(Cell) (int64, int64)) (mismatch, falseAllow, falseDeny float64) {
	var k float64
	for i, p := range res.Patterns {
		if !p.realistic() {
			continue
		}
		fa, fd := of(r.Cells[i])
		falseAllow += ratio(fa, r.Cells[i].Decisions)
		falseDeny += ratio(fd, r.Cells[i].Decisions)
		k++
	}
	if k == 0 {
		return 0, 0, 0
	}
	return (falseAllow + falseDeny) / k, falseAllow / k, falseDeny / k
}

func byClass(cs ...Class) func(*Pattern) bool {
	return func(p *Pattern) bool {
		for _, c := range cs {
			if p.Class == c {
				return true
			}
		}
		return false
	}
}

func all(*Pattern) bool { return true }

// ratioText formats units/L with enough decimals to show every unit.
func (res *Result) ratioText(units int64) string {
	d := max(2, int(math.Ceil(math.Log10(float64(res.Config.Limit)))))
	return fmt.Sprintf("%.*f", d, float64(units)/float64(res.Config.Limit))
}

func pctText(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 1e-5:
		return "<0.001%"
	case f < 0.01:
		return fmt.Sprintf("%.3f%%", 100*f)
	}
	return fmt.Sprintf("%.2f%%", 100*f)
}

func nText(v Variant) string {
	if v.N == 0 {
		return "—"
	}
	return fmt.Sprint(v.N)
}

func boundText(k Kind) string {
	switch k {
	case Fixed:
		return "2L"
	case Sliding:
		return "< 2L (L + c[e−N]); ≈ (1+1/N)·L smooth"
	case Strict:
		return "≤ L"
	case Token:
		return "Burst + ⌊D·L/W⌋ in any D: ≤ 2L in one W"
	}
	return "≤ L, exact"
}

func useCase(k Kind) string {
	switch k {
	case Fixed:
		return "coarse quotas (per day or hour), cheap counting; lets 2L through at a boundary"
	case Sliding:
		return "throughput shaping, where smoothness matters more than a hard ceiling (the default)"
	case Strict:
		return "hard ceilings: quotas, billing, protecting a fragile backend"
	case Token:
		return "a rate and a burst (x/time/rate), smooth pacing one unit every W/L, Wait in booking order"
	}
	return "exact limits where memory O(L) per key is affordable (small L, few keys)"
}

// Table is the summary table in the shape of the seed note's comparison,
// with measured numbers.
func (res *Result) Table() string {
	var b strings.Builder
	b.WriteString("| Algorithm | N | Precision: decisions ≠ exact log (false allow / false deny) | Estimate errors, own history (false allow / false deny) | " +
		"Space: bytes/key | Burst: worst window / L, all patterns | smooth | boundary | adversarial | True bound | ns/decision | Use case |\n")
	b.WriteString("|---|---:|---|---|---:|---:|---:|---:|---:|---|---:|---|\n")
	for _, r := range res.Rows {
		m, fa, fd := r.Precision(res)
		em, efa, efd := r.EstimateErrors(res)
		fmt.Fprintf(&b, "| %s | %s | %s (%s / %s) | %s (%s / %s) | %.0f | **%s** | %s | %s | %s | %s | %.0f | %s |\n",
			r.Name(), nText(r.Variant), pctText(m), pctText(fa), pctText(fd), pctText(em), pctText(efa), pctText(efd), r.BytesPerKey,
			res.ratioText(r.worstUnits(res, all)), res.ratioText(r.worstUnits(res, byClass(Smooth))),
			res.ratioText(r.worstUnits(res, byClass(Boundary))), res.ratioText(r.worstUnits(res, byClass(Adversarial))),
			boundText(r.Kind), r.NsPerDecision(), useCase(r.Kind))
	}
	return b.String()
}

// PatternTables are the per-pattern details: the worst window over L, and
// the mismatch shares.
func (res *Result) PatternTables() string {
	var b strings.Builder
	head := func(first string) {
		b.WriteString("| " + first + " |")
		for _, p := range res.Patterns {
			b.WriteString(" " + p.Name + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(res.Patterns)) + "\n")
	}
	// rows writes one table row per algorithm, one cell per pattern.
	rows := func(cell func(i int, c Cell) string) {
		head("Algorithm")
		for _, r := range res.Rows {
			b.WriteString("| " + r.Name() + " |")
			for i, c := range r.Cells {
				b.WriteString(" " + cell(i, c) + " |")
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("Worst number of units admitted in any window (t−W, t], divided by L (for tenants: the worst key):\n\n")
	rows(func(_ int, c Cell) string { return res.ratioText(c.WorstUnits) })
	b.WriteString("| *exact log (the lab's reference)* |")
	for _, ref := range res.Reference {
		b.WriteString(" " + res.ratioText(ref.WorstUnits) + " |")
	}
	b.WriteString("\n\nShare of decisions that differ from the exact log: false allows / false denies:\n\n")
	rows(func(_ int, c Cell) string {
		return pctText(ratio(c.FalseAllows, c.Decisions)) + " / " + pctText(ratio(c.FalseDenies, c.Decisions))
	})
	b.WriteString("\nEstimate errors: decisions that differ from those of an exact limiter holding the algorithm's own history " +
		"(false allows / false denies):\n\n")
	rows(func(_ int, c Cell) string {
		return pctText(ratio(c.EstFalseAllows, c.Decisions)) + " / " + pctText(ratio(c.EstFalseDenies, c.Decisions))
	})
	b.WriteString("\nUnits admitted, as a share of the exact log's (throughput relative to an exact limiter):\n\n")
	rows(func(i int, c Cell) string {
		return fmt.Sprintf("%.1f%%", 100*ratio(c.Admitted, res.Reference[i].Admitted))
	})
	return b.String()
}

// kindLine lists the worst window over L of every row of kind k on the
// patterns keep says, e.g. "1.99 (N=1), 1.99 (N=2), …".
func (res *Result) kindLine(k Kind, keep func(*Pattern) bool) string {
	var parts []string
	for _, r := range res.Rows {
		if r.Kind == k {
			parts = append(parts, fmt.Sprintf("%s (N=%d)", res.ratioText(r.worstUnits(res, keep)), r.N))
		}
	}
	return strings.Join(parts, ", ")
}

func (res *Result) row(k Kind) *Row {
	for _, r := range res.Rows {
		if r.Kind == k {
			return r
		}
	}
	return nil
}

// Markdown is docs/accuracy.md.
func (res *Result) Markdown(m Meta, svgName string) string {
	c := res.Config
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	ns := make([]string, len(c.SubWindows))
	for i, n := range c.SubWindows {
		ns[i] = fmt.Sprint(n)
	}
	var decisions int64
	for _, pt := range res.Patterns {
		decisions += int64(len(pt.Reqs))
	}

	p("# Accuracy lab: ringlimit's algorithms against an exact sliding log\n\n")
	p("Generated by `%s`; do not edit by hand.\n", m.Command)
	p("Run on %s, %s. The same seed gives the same file, except for this line and the\n", m.Machine, m.Date)
	p("bytes/key and ns/decision columns, which are measurements.\n\n")
	p("Configuration: L = %d units per key per W = %v, N ∈ {%s} for the counters, seed %d; %d requests in %d patterns per algorithm.\n",
		c.Limit, c.Window, strings.Join(ns, ", "), c.Seed, decisions, len(res.Patterns))
	if c.Window == DefaultWindow {
		p("W is 1.2 s rather than 1 s because 1 s cannot be cut into 60 sub-windows of whole nanoseconds (10⁹/60 is not an\n" +
			"integer), which the engine requires; every number below is a ratio to L or a share of decisions, and the patterns\n" +
			"are defined in units of W, so W's value does not change them.\n")
	}
	if res.LogNote != "" {
		p("\n**Note:** %s.\n", res.LogNote)
	}

	p("\n## Summary\n\nThe seed note's comparison table, measured:\n\n")
	b.WriteString(res.Table())
	p("\n- **Precision**: the share of decisions that differ from the exact sliding log fed the same requests, as the mean over\n" +
		"  the realistic patterns (the three Poisson rates, on/off and tenants; each pattern weighs the same). A false allow is\n" +
		"  a request the algorithm admitted and the log refused; a false deny the reverse. The two histories diverge after\n" +
		"  the first disagreement, so near saturation a shift in when units were admitted shows up as pairs of opposite\n" +
		"  mismatches.\n" +
		"- **Estimate errors, own history**: the same mean, comparing each decision with the one an exact limiter holding\n" +
		"  the algorithm's own admissions would make (its units in (t−W, t], plus n, at most L). This isolates the\n" +
		"  estimate from the divergence: a false allow here is an admission that takes a true window over L.\n" +
		"- Both shares are large only at and above the limit, where every request is on the margin: an algorithm that frees\n" +
		"  a unit a few milliseconds later than the exact log refuses every request in those milliseconds, yet admits nearly\n" +
		"  as many units (see *Units admitted* below). Below the limit (Poisson 0.5×) they are near zero. Cloudflare's\n" +
		"  0.003%% wrong decisions (docs/design.md §1) come from real traffic, almost all of it far below its limits.\n")
	memLine := fmt.Sprintf("  %d keys for the counters", res.Rows[0].MemKeys)
	if r := res.row(Log); r != nil {
		memLine += fmt.Sprintf(" (one request each: their state does not grow with the count), %d keys for the log, each\n  filled with L = %d units spread over one window (its state grows with the units in the window)", r.MemKeys, r.MemFill)
	}
	p("- **Space**: growth of the live heap (after a GC) per key inserted into a fresh engine, the key strings excluded:\n%s.\n", memLine)
	p("- **Burst**: the most units the algorithm admitted in any window (t−W, t] of the timeline, divided by L: the worst\n" +
		"  over all patterns, over the smooth ones (Poisson, tenants), on the boundary burst and on the adversarial burst.\n" +
		"- **ns/decision**: wall time of the replay loop over all patterns (AllowAt only, one goroutine, the traffic\n" +
		"  precomputed), divided by the decisions; a key's first request, which creates it, included.\n\n")

	p("## Per pattern\n\n")
	b.WriteString(res.PatternTables())

	p("\n## Charts\n\n![Units admitted in the trailing window under the boundary and the adversarial bursts](%s)\n\n", svgName)
	chartN := c.SubWindows[0]
	for _, n := range c.SubWindows {
		if n == ChartN {
			chartN = n
		}
	}
	p("[%s](%s) plots, for one key, the units admitted in the trailing window (t−W, t] over time, for the sliding log,\n"+
		"strict and sliding counters at N = %d and the fixed window, with the limit L and 2L.\n\n", svgName, svgName, chartN)
	p("- **Boundary**: the fixed window admits both halves and holds 2L for most of a window; the others refuse the second\n" +
		"  half (the counters see the first half in a sub-window they count in full) and never leave L.\n" +
		"- **Adversarial**: the fixed window admits L again at once after the burst (2L). The sliding counter refuses\n" +
		"  while the burst's sub-window counts in full, then, during the one sub-window in which the burst is the oldest and\n" +
		"  weighted by (w−r)/w, admits a unit each time the weight frees one, and reaches L + (L−1) just before the burst\n" +
		"  leaves the true window. Strict and the log hold the line at L: their count drops to 0 for an instant when the\n" +
		"  burst leaves the window, and the greedy stream refills it within milliseconds.\n\n")

	p("## Patterns\n\nAll times are synthetic, relative to a start aligned to W (so a fixed window and a sub-window of every N start\n" +
		"there), generated from the seed before any replay (PCG streams, one per pattern and per tenant):\n\n")
	for _, pt := range res.Patterns {
		p("- **%s** (%d requests): %s.\n", pt.Name, len(pt.Reqs), pt.About)
	}

	p("\n## Method\n\n")
	p("- Every algorithm runs in a fresh engine (`Config.DisableEviction = true`, since the timeline is synthetic and the\n" +
		"  engine judges idleness by its own clock) and decides every request of the pattern with `AllowAt`, in time order.\n" +
		"- The reference is an exact sliding log written in the lab: an event at s counts at t iff t−W < s ≤ t, and n units\n" +
		"  are admitted iff the log's own admitted units in (t−W, t] plus n are at most L.\n" +
		"- **Each side decides its own stream.** The engine and the log see the same requests (fixed in advance, not\n" +
		"  driven by decisions), but the log's state evolves from its own admissions and the engine's from its own. Once they\n" +
		"  disagree their states differ, so one engine admission the log refused can be followed by a log admission the\n" +
		"  engine refuses: the shares count disagreement with an exact limiter fed the same traffic, not errors of one\n" +
		"  estimate.\n" +
		"- **Estimate errors** replay the algorithm's own decisions against its own admitted units: for each request, would\n" +
		"  its units in (t−W, t] plus n fit L? Strict and the log never admit what does not fit; their false denies are the\n" +
		"  capacity they give up.\n" +
		"- **Worst window** is measured separately on the engine's own admissions: two pointers over its admitted events, per\n" +
		"  key, give the most units inside any window (t−W, t]; divided by L. This is what a protected backend sees.\n")
	if res.row(Log) != nil {
		p("- The sliding log row is the engine's own sliding log algorithm (`engine.ParseAlgorithm(\"log\")`), checked against\n" +
			"  the lab's independent log.\n")
	}
	if res.row(Token) != nil {
		p("- The token bucket makes another promise than a window of L per W: Burst + ⌊D·L/W⌋ units in any interval D\n" +
			"  (docs/design.md §11), here Burst = L, so up to 2L in one window of length W. Its disagreements with the\n" +
			"  exact log, and its estimate errors (admissions a log of L per W would refuse; it never refuses what its own\n" +
			"  rule admits), measure that difference of definition, not mistakes: against its own rule it is exact\n" +
			"  (engine/tokenbucket_test.go checks it against an exact GCRA model).\n")
	}

	p("\n## The true bounds (docs/design.md §1)\n\n")
	p("With w = W/N and c[k] the units admitted in sub-window k, at time t in sub-window e:\n\n")
	p("- **Weighted sliding counter**: the true count exceeds the estimate by at most the weighted-out part of the oldest\n"+
		"  sub-window, so a window holds at most L + c[e−N] < **2L**, for every N. The rule of thumb (1+1/N)·L describes\n"+
		"  smooth traffic only, where a sub-window holds about L/N: c[e−N] is then about L/N, a few units more where\n"+
		"  arrivals happen to bunch (which matters at large N, where L/N is a unit or two). Measured on the adversarial\n"+
		"  burst: %s; on smooth traffic: %s; on on/off bursts: %s.\n",
		res.kindLine(Sliding, byClass(Adversarial)), res.kindLine(Sliding, byClass(Smooth)), res.kindLine(Sliding, byClass(Bursty)))
	p("- **Strict counter**: every overlapping sub-window counts in full, so no window ever holds more than **L** (measured\n"+
		"  worst: %s); it pays with up to one sub-window of capacity.\n", res.kindLine(Strict, all))
	if r := res.row(Fixed); r != nil {
		p("- **Fixed window**: L at the end of one window and L at the start of the next, **2L** (measured on the boundary\n"+
			"  burst: %s).\n", res.ratioText(r.worstUnits(res, byClass(Boundary))))
	}
	if r := res.row(Log); r != nil {
		var mm int64
		for _, cell := range r.Cells {
			mm += cell.FalseAllows + cell.FalseDenies
		}
		p("- **Sliding log**: exact, never more than **L** (measured worst: %s; decisions differing from the lab's log: %d\n"+
			"  of %d), at O(L) memory per key.\n", res.ratioText(r.worstUnits(res, all)), mm, decisions)
	} else {
		p("- **Sliding log**: exact, never more than **L**, at O(L) memory per key (the lab's reference; the engine has none).\n")
	}

	p("\n## Where the seed's table was wrong\n\n")
	p("The note this project grew from (its \"seed\", not part of this repository) ends with a table comparing fixed window,\n" +
		"sliding window counter and sliding window log. Against the measurements above:\n\n")
	p("- **Burst of the sliding window counter, “≤ (1+1/N)× the limit”: wrong.** The bound holds only for smooth traffic.\n"+
		"  L admitted at the end of one sub-window, then greedy requests as its weight decays, put L + (L−1) units into one\n"+
		"  window for every N (measured: %s). More sub-windows do not help: the burst sits in one sub-window whatever N is.\n"+
		"  The true bound is L + c[e−N] < 2L; where a hard ceiling matters, use the strict counter (≤ L) or a log.\n",
		res.kindLine(Sliding, byClass(Adversarial)))
	var prec, est []string
	for _, r := range res.Rows {
		if r.Kind == Sliding {
			m, _, _ := r.Precision(res)
			e, _, _ := r.EstimateErrors(res)
			prec = append(prec, fmt.Sprintf("%s (N=%d)", pctText(m), r.N))
			est = append(est, fmt.Sprintf("%s (N=%d)", pctText(e), r.N))
		}
	}
	p("- **Precision “medium (≈1/N error)”**: the error of one estimate is bounded by the oldest sub-window's count, not\n"+
		"  by L/N, so ≈1/N describes neither the worst case nor the share of wrong decisions. Measured on the realistic\n"+
		"  patterns, the disagreement with an exact log is %s, and the estimate errors on the\n"+
		"  counter's own history %s: they fall with N, far more slowly than 1/N, and come\n"+
		"  mostly from traffic at or above the limit.\n", strings.Join(prec, ", "), strings.Join(est, ", "))
	p("- **Use case “millisecond-precise limiting”** for the counter: it is an approximation with a worst case near 2L;\n" +
		"  precise limiting needs the strict counter (a hard bound, slightly conservative) or the log (exact).\n")
	p("- **Space O(N)**: right in order, but a correct ring needs N+1 sub-windows: at time t the window overlaps N+1 of them,\n" +
		"  and with N slots the partial oldest one shares a slot with the current one and is overwritten.\n")
	p("- **Sliding log space O(maxQPS × window)**: only admitted units need to be kept, so O(L) per key, whatever the\n" +
		"  request rate.\n")
	p("- **Fixed window burst 2×**: right (measured above).\n")
	p("\nThe seed's code has further faults, listed in docs/design.md §1 (it does not compile, never zeroes slots, weights the\n" +
		"sub-windows linearly and undercounts by about 2×, checks without incrementing); ringlimit keeps none of them.\n")
	return b.String()
}
