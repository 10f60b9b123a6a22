package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// report is the result of one run; its JSON field names are stable.
type report struct {
	Config             configReport  `json:"config"`
	ElapsedSeconds     float64       `json:"elapsed_seconds"`
	Interrupted        bool          `json:"interrupted"`
	Decisions          int64         `json:"decisions"`
	Allowed            int64         `json:"allowed"`
	Denied             int64         `json:"denied"`
	DecisionsPerSecond float64       `json:"decisions_per_second"`
	Redraws            int64         `json:"redraws"`
	ZipfDrawNs         float64       `json:"zipf_draw_ns"`
	Latency            latencyReport `json:"latency"`
	Tiers              []tierReport  `json:"tiers"`
	Keys               keysReport    `json:"keys"`
	Memory             memoryReport  `json:"memory"`
	Audit              auditReport   `json:"audit"`
	LiveAudit          liveAudit     `json:"live_audit"`
}

type configReport struct {
	Algorithm       string  `json:"algorithm"`
	Tenants         int     `json:"tenants"`
	DurationSeconds float64 `json:"duration_seconds"`
	WindowSeconds   float64 `json:"window_seconds"`
	SubWindows      int     `json:"subwindows"`
	Workers         int     `json:"workers"`
	GOMAXPROCS      int     `json:"gomaxprocs"`
	Clock           string  `json:"clock"`
	ZipfS           float64 `json:"zipf_s"`
	Seed            int64   `json:"seed"`
	Sample          int     `json:"sample"`
	LiveAudit       float64 `json:"live_audit"`
	GoVersion       string  `json:"go_version"`
}

type latencyReport struct {
	Method      string `json:"method"`
	SampleEvery int    `json:"sample_every"`
	Samples     int    `json:"samples"`
	P50Ns       int64  `json:"p50_ns"`
	P99Ns       int64  `json:"p99_ns"`
	P999Ns      int64  `json:"p999_ns"`
	MaxNs       int64  `json:"max_ns"`
}

type tierReport struct {
	Tier    int   `json:"tier"`
	Limit   int64 `json:"limit"`
	Tenants int   `json:"tenants"`
	Allowed int64 `json:"allowed"`
	Denied  int64 `json:"denied"`
}

type keysReport struct {
	Live    int64 `json:"live"`
	Evicted int64 `json:"evicted"`
	Refused int64 `json:"refused"`
}

type memoryReport struct {
	BaselineHeapBytes uint64  `json:"baseline_heap_bytes"`
	FinalHeapBytes    uint64  `json:"final_heap_bytes"`
	BytesPerKey       float64 `json:"bytes_per_key"`
	GCCycles          uint32  `json:"gc_cycles"`
	GCPauseTotalNs    uint64  `json:"gc_pause_total_ns"`
}

type auditReport struct {
	Tenants          int           `json:"tenants"`
	TrafficShare     float64       `json:"traffic_share"`
	Decisions        int64         `json:"decisions"`
	EngineAllowed    int64         `json:"engine_allowed"`
	LogAllowed       int64         `json:"log_allowed"`
	FalseAllows      int64         `json:"false_allows"`
	FalseDenies      int64         `json:"false_denies"`
	MismatchShare    float64       `json:"mismatch_share"`
	WorstOvershoot   float64       `json:"worst_overshoot"`
	WorstTenant      string        `json:"worst_tenant"`
	WorstLimit       int64         `json:"worst_limit"`
	WorstWindowUnits int64         `json:"worst_window_units"`
	WorstWarm        float64       `json:"worst_warm_overshoot"`
	WorstWarmTenant  string        `json:"worst_warm_tenant"`
	Bound            string        `json:"bound"`
	WithinBound      bool          `json:"within_bound"`
	PerTenant        []auditTenant `json:"per_tenant"`
}

type auditTenant struct {
	Tenant         string  `json:"tenant"`
	Rank           int     `json:"rank"`
	Limit          int64   `json:"limit"`
	Decisions      int64   `json:"decisions"`
	EngineAllowed  int64   `json:"engine_allowed"`
	LogAllowed     int64   `json:"log_allowed"`
	FalseAllows    int64   `json:"false_allows"`
	FalseDenies    int64   `json:"false_denies"`
	MaxWindowUnits int64   `json:"max_window_units"`
	Overshoot      float64 `json:"overshoot"`
	WarmOvershoot  float64 `json:"warm_overshoot"`
}

func newReport(o options, p *plan, res *loadResult) *report {
	clk := "precise"
	if o.coarse {
		clk = "coarse"
	}
	r := &report{
		Config: configReport{
			Algorithm: o.alg.String(), Tenants: o.tenants, DurationSeconds: o.duration.Seconds(),
			WindowSeconds: o.window.Seconds(), SubWindows: o.subWindows, Workers: o.workers,
			GOMAXPROCS: runtime.GOMAXPROCS(0), Clock: clk, ZipfS: o.zipf, Seed: o.seed,
			Sample: len(p.audited) - p.liveOnly(), LiveAudit: o.liveAudit, GoVersion: runtime.Version(),
		},
		ElapsedSeconds: res.elapsed.Seconds(),
		Interrupted:    res.interrupted,
	}
	if o.alg == engine.FixedWindow {
		r.Config.SubWindows = 0 // the engine ignores it
	}
	for i := range numTiers {
		r.Tiers = append(r.Tiers, tierReport{Tier: i, Limit: tierLimits[i], Tenants: p.tierTenants[i]})
	}
	var lat []uint32
	for _, w := range res.workers {
		for i := range numTiers {
			r.Tiers[i].Denied += w.counts[i][0]
			r.Tiers[i].Allowed += w.counts[i][1]
		}
		r.Redraws += w.redraws
		lat = append(lat, w.lat...)
	}
	for _, t := range r.Tiers {
		r.Allowed += t.Allowed
		r.Denied += t.Denied
	}
	r.Decisions = r.Allowed + r.Denied
	r.DecisionsPerSecond = float64(r.Decisions) / res.elapsed.Seconds()
	r.Latency = latencyOf(lat)
	r.Audit = auditOf(o.alg.String(), p, res.auditors)
	r.Audit.TrafficShare = p.auditShare(o.zipf)
	return r
}

func latencyOf(lat []uint32) latencyReport {
	slices.Sort(lat)
	l := latencyReport{
		Method:      fmt.Sprintf("sampled: time.Now around 1 in %d calls per worker (sparser if the buffer fills); includes the timer's cost", sampleEvery),
		SampleEvery: sampleEvery, Samples: len(lat),
	}
	if len(lat) == 0 {
		return l
	}
	q := func(f float64) int64 { // nearest rank
		i := int(f*float64(len(lat))+0.999999) - 1
		return int64(lat[min(max(i, 0), len(lat)-1)])
	}
	l.P50Ns, l.P99Ns, l.P999Ns, l.MaxNs = q(0.50), q(0.99), q(0.999), int64(lat[len(lat)-1])
	return l
}

func auditOf(alg string, p *plan, auditors []*auditor) auditReport {
	ar := auditReport{Bound: boundText(alg), WithinBound: true, PerTenant: []auditTenant{}}
	for slot, a := range auditors {
		ae := p.audited[slot]
		if ae.live && !ae.offline {
			continue // only in the live-audit section
		}
		at := auditTenant{
			Tenant: p.keys[ae.tenant], Rank: ae.rank, Limit: a.limit,
			Decisions: a.decisions, EngineAllowed: a.engineAllowed, LogAllowed: a.logAllowed,
			FalseAllows: a.falseAllows, FalseDenies: a.falseDenies,
			MaxWindowUnits: a.maxUnits, Overshoot: a.overshoot(), WarmOvershoot: a.warmOvershoot(),
		}
		if ar.WorstWarmTenant == "" || at.WarmOvershoot > ar.WorstWarm {
			ar.WorstWarm, ar.WorstWarmTenant = at.WarmOvershoot, at.Tenant
		}
		ar.PerTenant = append(ar.PerTenant, at)
		ar.Tenants++
		ar.Decisions += a.decisions
		ar.EngineAllowed += a.engineAllowed
		ar.LogAllowed += a.logAllowed
		ar.FalseAllows += a.falseAllows
		ar.FalseDenies += a.falseDenies
		if !withinBound(alg, a.maxUnits, a.limit) {
			ar.WithinBound = false
		}
		// Compare maxUnits/limit exactly: a·l' > a'·l (both far below 2^31).
		if ar.WorstTenant == "" || a.maxUnits*ar.WorstLimit > ar.WorstWindowUnits*a.limit {
			ar.WorstOvershoot, ar.WorstTenant = at.Overshoot, at.Tenant
			ar.WorstLimit, ar.WorstWindowUnits = a.limit, a.maxUnits
		}
	}
	if ar.Decisions > 0 {
		ar.MismatchShare = float64(ar.FalseAllows+ar.FalseDenies) / float64(ar.Decisions)
	}
	return ar
}

func keysOf(s engine.Stats) keysReport {
	return keysReport{Live: s.Keys, Evicted: s.Evicted, Refused: s.Refused}
}

// memSnapshot is a reading taken right after a forced GC.
type memSnapshot struct {
	heap    uint64 // live heap objects, bytes
	pauseNs uint64
	numGC   uint32
}

// readMem forces a GC and reads the live heap; it stops the world twice
// (the GC and ReadMemStats), so it is only called outside the load.
func readMem() memSnapshot {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSnapshot{heap: newHeapReader().read(), pauseNs: ms.PauseTotalNs, numGC: ms.NumGC}
}

// memoryOf compares the end reading with the baseline. The GC count and
// pause include the end reading's own forced GC, not the baseline's.
func memoryOf(base, end memSnapshot, keys int64) memoryReport {
	m := memoryReport{
		BaselineHeapBytes: base.heap, FinalHeapBytes: end.heap,
		GCCycles: end.numGC - base.numGC, GCPauseTotalNs: end.pauseNs - base.pauseNs,
	}
	if keys > 0 {
		m.BytesPerKey = (float64(end.heap) - float64(base.heap)) / float64(keys)
	}
	return m
}

// heapReader reads the live heap objects from runtime/metrics, which does not
// stop the world.
type heapReader struct{ s []metrics.Sample }

func newHeapReader() heapReader {
	return heapReader{s: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}}
}

func (h heapReader) read() uint64 {
	metrics.Read(h.s)
	if h.s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return h.s[0].Value.Uint64()
}

func writeHeapProfile(f *os.File) error {
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return err
	}
	return f.Close()
}

func writeJSON(w io.Writer, r *report) error {
	return json.NewEncoder(w).Encode(r)
}

func writeText(w io.Writer, r *report) error {
	var b strings.Builder
	c := r.Config
	alg := c.Algorithm
	if c.SubWindows > 0 {
		alg += fmt.Sprintf(", %d sub-windows", c.SubWindows)
	}
	fmt.Fprintf(&b, "ringbench: %s tenants, %s window (%s), %d workers (GOMAXPROCS %d), zipf s=%g, seed %d, %s clock, %s\n",
		commas(int64(c.Tenants)), time.Duration(c.WindowSeconds*1e9), alg, c.Workers, c.GOMAXPROCS, c.ZipfS, c.Seed, c.Clock, c.GoVersion)
	note := ""
	if r.Interrupted {
		note = " (interrupted)"
	}
	fmt.Fprintf(&b, "\nthroughput  %s decisions in %.2f s%s: %s decisions/s (allowed %s, denied %s)\n",
		commas(r.Decisions), r.ElapsedSeconds, note, si(r.DecisionsPerSecond), pct(r.Allowed, r.Decisions), pct(r.Denied, r.Decisions))
	fmt.Fprintf(&b, "            load generator: one Zipf draw costs %.0f ns alone, and every decision makes one; %s redraws (an audited tenant drawn by a worker that does not own it)\n",
		r.ZipfDrawNs, commas(r.Redraws))
	l := r.Latency
	fmt.Fprintf(&b, "latency     p50 %s  p99 %s  p99.9 %s  max %s\n", ns(l.P50Ns), ns(l.P99Ns), ns(l.P999Ns), ns(l.MaxNs))
	fmt.Fprintf(&b, "            %s; %s samples\n", l.Method, commas(int64(l.Samples)))

	b.WriteString("\nper tier (limit per window)\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "limit\ttenants\tdecisions\tallowed\tdenied\tallowed %\t")
	for _, t := range r.Tiers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", commas(t.Limit), commas(int64(t.Tenants)), commas(t.Allowed+t.Denied),
			commas(t.Allowed), commas(t.Denied), pct(t.Allowed, t.Allowed+t.Denied))
	}
	fmt.Fprintf(tw, "all\t%s\t%s\t%s\t%s\t%s\t\n", commas(int64(c.Tenants)), commas(r.Decisions), commas(r.Allowed), commas(r.Denied), pct(r.Allowed, r.Decisions))
	tw.Flush()

	k, m := r.Keys, r.Memory
	fmt.Fprintf(&b, "\nkeys        %s live at the end, %s evicted (idle), %s refused\n", commas(k.Live), commas(k.Evicted), commas(k.Refused))
	fmt.Fprintf(&b, "memory      %.1f bytes/key (live heap after a GC, minus the baseline before the engine: %s → %s)\n",
		m.BytesPerKey, mib(m.BaselineHeapBytes), mib(m.FinalHeapBytes))
	if c.LiveAudit > 0 {
		b.WriteString("            (includes the live audit's buffer, 1 MiB, and logs; -live-audit 0 leaves them out)\n")
	}
	fmt.Fprintf(&b, "gc          %d cycles, %s total pause\n", m.GCCycles, time.Duration(m.GCPauseTotalNs))

	a := r.Audit
	if a.Tenants == 0 {
		b.WriteString("\naudit       none (-sample 0)\n")
	} else {
		fmt.Fprintf(&b, "\naudit       %d tenants picked by Zipf rank, from saturated to idle (%s of the draws), each driven by one worker through AllowAt at its own monotonic time (so at 1/%d of its Zipf rate)\n",
			a.Tenants, pctf(a.TrafficShare), c.Workers)
		b.WriteString("            measures: how the engine's decisions differ from an exact sliding log fed the same requests, and the most units the engine admitted in one window\n")
		fmt.Fprintf(&b, "            mismatches %s of %s decisions (false allows %s, false denies %s; no bound: once the two differ their histories diverge, so this counts disagreement, not error); engine admitted %s, exact log %s\n",
			pctf(a.MismatchShare), commas(a.Decisions), commas(a.FalseAllows), commas(a.FalseDenies), commas(a.EngineAllowed), commas(a.LogAllowed))
		verdict := "within"
		if !a.WithinBound {
			verdict = "EXCEEDED"
		}
		fmt.Fprintf(&b, "            worst overshoot %.3f × limit: %s (limit %s) admitted %s units in one window (%s; %s)\n",
			a.WorstOvershoot, a.WorstTenant, commas(a.WorstLimit), commas(a.WorstWindowUnits), boundPhrase(c.Algorithm), verdict)
		if c.Algorithm == "sliding" {
			b.WriteString("            (the default sliding window is not a hard limit: a burst is weighed down a window later while still inside it, so just under 2 × limit can pass; -algorithm strict holds 1 ×)\n")
		}
		if a.WorstWarm > 0 {
			fmt.Fprintf(&b, "            worst warm overshoot %.3f × limit: %s, over windows ending ≥ 2 windows after the tenant's first decision (%s)\n", a.WorstWarm, a.WorstWarmTenant, boundPhrase(c.Algorithm))
		} else {
			b.WriteString("            warm overshoot: no admission came 2 windows after a tenant's first decision (run longer)\n")
		}
		top := slices.Clone(a.PerTenant)
		slices.SortStableFunc(top, func(x, y auditTenant) int { return cmpFloat(y.Overshoot, x.Overshoot) })
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "\ttenant\trank\tlimit\tdecisions\tengine allowed\tlog allowed\tfalse allows\tfalse denies\tmax in window\tovershoot\twarm\t")
		for _, t := range top[:min(5, len(top))] {
			fmt.Fprintf(tw, "\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t\n", t.Tenant, t.Rank, commas(t.Limit), commas(t.Decisions),
				commas(t.EngineAllowed), commas(t.LogAllowed), commas(t.FalseAllows), commas(t.FalseDenies), commas(t.MaxWindowUnits), t.Overshoot, t.WarmOvershoot)
		}
		tw.Flush()
	}
	writeLive(&b, c.Algorithm, r.LiveAudit)
	_, err := io.WriteString(w, b.String())
	return err
}

// boundPhrase names the bound an algorithm promises for the units admitted
// in any one window, as the report prints it next to each figure.
func boundPhrase(alg string) string {
	switch alg {
	case "strict":
		return "strict bound: ≤ 1 × limit"
	case "sliding":
		return "sliding bound: < 2 × limit"
	}
	return "fixed bound: ≤ 2 × limit" // two adjacent windows
}

func cmpFloat(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// si formats a rate with a k/M suffix.
func si(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func ns(n int64) string { return time.Duration(n).String() }

func pct(part, whole int64) string {
	if whole == 0 {
		return "-"
	}
	return pctf(float64(part) / float64(whole))
}

func pctf(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }
