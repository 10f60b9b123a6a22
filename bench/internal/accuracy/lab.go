// Package accuracy is ringlimit's accuracy lab. It replays deterministic
// synthetic traffic through every algorithm of the engine with AllowAt and
// compares each decision with an exact sliding log, measures the most units
// each algorithm admitted in any true window of length W, and measures
// bytes per key and nanoseconds per decision. Markdown renders the result
// as docs/accuracy.md and Figure as docs/accuracy.svg; ringbench -mode
// accuracy runs it.
//
// Each algorithm decides its own stream. The engine and the exact log see
// the same requests (the patterns are fixed in advance, not driven by the
// decisions); the log's state evolves from its own admissions, the
// engine's from its own. A false allow is a request the engine admitted and
// the log refused, a false deny the reverse. Once the two have decided
// differently their states differ too, so these count disagreement with an
// exact limiter fed the same traffic, not errors of one estimate.
package accuracy

import (
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Config parameterises a run.
type Config struct {
	Limit      int64         // L, units per window per key: 1 … MaxLimit
	Window     time.Duration // W; a whole number of nanoseconds per sub-window for every N
	SubWindows []int         // the N of the sliding and strict counters
	Seed       uint64

	PatternWindows int // length of the one-key Poisson and on/off patterns, in windows
	Tenants        int // keys of the many-tenant pattern
	TenantWindows  int // its length, in windows
	MemKeys        int // keys inserted to measure bytes per key
}

// MaxLimit bounds Config.Limit: the adversarial pattern sends 8·L·max(N)
// requests, and the log's memory measurement L per key.
const MaxLimit = 1000

// DefaultWindow is the lab's W. One second, the usual choice, cannot be cut
// into 60 sub-windows of whole nanoseconds (10⁹/60 is not an integer), and
// the engine refuses that; 1.2 s can, for N = 1, 2, 10 and 60. Every
// measured ratio is in units of W and L, so W's value does not change them.
const DefaultWindow = 1200 * time.Millisecond

// DefaultSubWindows are the N the lab compares.
var DefaultSubWindows = []int{1, 2, 10, 60}

// DefaultConfig is the configuration behind docs/accuracy.md.
func DefaultConfig() Config {
	return Config{
		Limit: 100, Window: DefaultWindow, SubWindows: DefaultSubWindows, Seed: 1,
		PatternWindows: 120, Tenants: 1000, TenantWindows: 10, MemKeys: 100_000,
	}
}

// QuickConfig is DefaultConfig with short patterns and few keys, for tests
// and CI: the same worst cases, less statistics.
func QuickConfig() Config {
	c := DefaultConfig()
	c.PatternWindows, c.Tenants, c.TenantWindows, c.MemKeys = 10, 40, 4, 2000
	return c
}

// Validate checks c; its errors name the field.
func (c Config) Validate() error {
	switch {
	case c.Limit < 1 || c.Limit > MaxLimit:
		return fmt.Errorf("accuracy: Limit = %d, want 1 … %d", c.Limit, MaxLimit)
	case c.Window <= 0:
		return fmt.Errorf("accuracy: Window = %v, want > 0", c.Window)
	case len(c.SubWindows) == 0:
		return fmt.Errorf("accuracy: SubWindows is empty")
	case c.PatternWindows < 1 || c.TenantWindows < 1:
		return fmt.Errorf("accuracy: PatternWindows = %d, TenantWindows = %d, want ≥ 1", c.PatternWindows, c.TenantWindows)
	case c.Tenants < 1 || c.MemKeys < 1:
		return fmt.Errorf("accuracy: Tenants = %d, MemKeys = %d, want ≥ 1", c.Tenants, c.MemKeys)
	}
	for _, n := range c.SubWindows {
		if n < 1 || n > engine.MaxSubWindows {
			return fmt.Errorf("accuracy: SubWindows has %d, want 1 … %d", n, engine.MaxSubWindows)
		}
		if int64(c.Window)%int64(n) != 0 {
			return fmt.Errorf("accuracy: Window = %v is not a whole number of nanoseconds per sub-window for N = %d", c.Window, n)
		}
	}
	return nil
}

// Kind names an algorithm family.
type Kind string

const (
	Fixed   Kind = "fixed"
	Sliding Kind = "sliding"
	Strict  Kind = "strict"
	Log     Kind = "log"
	Token   Kind = "token"
)

// Variant is one engine configuration under test.
type Variant struct {
	Kind Kind
	Alg  engine.Algorithm
	N    int // sub-windows; 0 for fixed and log
}

// Name is the variant's row label.
func (v Variant) Name() string {
	switch v.Kind {
	case Fixed:
		return "fixed window"
	case Sliding:
		return fmt.Sprintf("sliding window counter, N=%d", v.N)
	case Strict:
		return fmt.Sprintf("strict counter, N=%d", v.N)
	case Token:
		return "token bucket, Burst = L"
	}
	return "sliding log"
}

// Cell is one variant's measurements on one pattern.
type Cell struct {
	Decisions   int64
	FalseAllows int64 // the engine admitted, the exact log refused
	FalseDenies int64 // the engine refused, the exact log admitted
	// EstFalseAllows and EstFalseDenies compare each decision with the one
	// an exact limiter holding the engine's own history would make: the
	// units the engine admitted in (t−W, t], plus n, at most L. They
	// measure the estimate alone, without the divergence of two histories.
	EstFalseAllows int64
	EstFalseDenies int64
	Admitted       int64 // units the engine admitted
	WorstUnits     int64 // most units the engine admitted in one window (t−W, t], over the worst key
	Nanos          int64 // wall time of the replay: the AllowAt calls only

	admitted []event // the engine's admissions, kept for one-key patterns (the charts)
}

// Mismatch is the share of decisions that differ from the exact log.
func (c Cell) Mismatch() float64 { return ratio(c.FalseAllows+c.FalseDenies, c.Decisions) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Row is one variant's results.
type Row struct {
	Variant
	Cells       []Cell // by pattern
	BytesPerKey float64
	MemKeys     int   // keys behind BytesPerKey
	MemFill     int64 // units admitted per key before measuring
}

// NsPerDecision is the replay time over all patterns per decision.
func (r *Row) NsPerDecision() float64 {
	var ns, d int64
	for _, c := range r.Cells {
		ns += c.Nanos
		d += c.Decisions
	}
	return ratio(ns, d)
}

// Reference is the exact log's own result on one pattern.
type Reference struct {
	Admitted   int64
	WorstUnits int64
	allowed    []bool  // by request
	admitted   []event // one-key patterns only
}

// Result is a whole run.
type Result struct {
	Config    Config
	Patterns  []*Pattern
	Reference []Reference // by pattern
	Rows      []*Row
	// LogNote is empty when the engine offers the sliding log; otherwise it
	// says why the log row is missing.
	LogNote string
	Elapsed time.Duration
}

// Variants lists the configurations under test: fixed once, sliding and
// strict at every N, the token bucket with Burst = L (the default), and
// the engine's sliding log if it has one (engine.ParseAlgorithm("log")),
// else a note why not.
func Variants(c Config) ([]Variant, string) {
	vs := []Variant{{Kind: Fixed, Alg: engine.FixedWindow}}
	for _, n := range c.SubWindows {
		vs = append(vs, Variant{Kind: Sliding, Alg: engine.SlidingWindow, N: n})
	}
	for _, n := range c.SubWindows {
		vs = append(vs, Variant{Kind: Strict, Alg: engine.SlidingWindowStrict, N: n})
	}
	vs = append(vs, Variant{Kind: Token, Alg: engine.TokenBucket})
	alg, err := engine.ParseAlgorithm("log")
	if err != nil {
		return vs, fmt.Sprintf("the engine has no sliding log algorithm (engine.ParseAlgorithm(\"log\"): %v); its row is left out", err)
	}
	return append(vs, Variant{Kind: Log, Alg: alg}), ""
}

func (c Config) engineConfig(v Variant) engine.Config {
	return engine.Config{Limit: c.Limit, Window: c.Window, SubWindows: v.N, Algorithm: v.Alg, DisableEviction: true}
}

// Run runs the lab. Progress lines go to progress (may be nil).
func Run(c Config, progress io.Writer) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if progress == nil {
		progress = io.Discard
	}
	start := time.Now()
	res := &Result{Config: c, Patterns: Patterns(c)}
	variants, note := Variants(c)
	res.LogNote = note

	times := make([][]time.Time, len(res.Patterns))
	for i, p := range res.Patterns {
		times[i] = make([]time.Time, len(p.Reqs))
		for j, r := range p.Reqs {
			times[i][j] = time.Unix(0, r.T)
		}
		res.Reference = append(res.Reference, reference(c, p))
	}
	memKeys := make([]string, c.MemKeys)
	for i := range memKeys {
		memKeys[i] = fmt.Sprintf("mem-%07d", i)
	}

	for _, v := range variants {
		row := &Row{Variant: v}
		for i, p := range res.Patterns {
			cell, err := replay(c, v, p, times[i], res.Reference[i])
			if err != nil {
				if v.Kind == Log {
					res.LogNote = fmt.Sprintf("the engine's sliding log failed: %v; its row is left out", err)
					row = nil
					break
				}
				return nil, err
			}
			row.Cells = append(row.Cells, cell)
		}
		if row == nil {
			continue
		}
		if err := measureMemory(c, row, memKeys); err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, row)
		var d int64
		for _, cell := range row.Cells {
			d += cell.Decisions
		}
		fmt.Fprintf(progress, "accuracy: %-32s %9d decisions  %6.1f ns/decision  %7.1f B/key\n",
			v.Name(), d, row.NsPerDecision(), row.BytesPerKey)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// reference runs the exact log over p.
func reference(c Config, p *Pattern) Reference {
	logs := make([]*ExactLog, len(p.Keys))
	wm := make([]WindowMax, len(p.Keys))
	for i := range logs {
		logs[i] = NewExactLog(c.Limit, int64(c.Window))
		wm[i].Window = int64(c.Window)
	}
	ref := Reference{allowed: make([]bool, len(p.Reqs))}
	for i, r := range p.Reqs {
		if ref.allowed[i] = logs[r.Key].Allow(r.T, int64(r.N)); ref.allowed[i] {
			ref.Admitted += int64(r.N)
			wm[r.Key].Add(r.T, int64(r.N))
			if len(p.Keys) == 1 {
				ref.admitted = append(ref.admitted, event{r.T, int64(r.N)})
			}
		}
	}
	for i := range wm {
		ref.WorstUnits = max(ref.WorstUnits, wm[i].Max())
	}
	return ref
}

// timedRuns is how many times each pattern is replayed per variant, each on
// a fresh engine; the fastest run's time is kept, so that the first
// variant does not pay for a cold heap and caches.
const timedRuns = 2

// replay runs p through fresh engines configured as v, timing the AllowAt
// calls alone, then compares the decisions with the exact log and with an
// exact limiter that has the engine's own history.
func replay(c Config, v Variant, p *Pattern, times []time.Time, ref Reference) (Cell, error) {
	keys, reqs := p.Keys, p.Reqs
	cell := Cell{Decisions: int64(len(reqs))}
	var got, again []bool
	for run := range timedRuns {
		e, err := engine.New(c.engineConfig(v))
		if err != nil {
			return Cell{}, fmt.Errorf("%s: %w", v.Name(), err)
		}
		out := make([]bool, len(reqs))
		runtime.GC()
		t0 := time.Now()
		for i := range reqs {
			out[i] = e.AllowAt(keys[reqs[i].Key], int64(reqs[i].N), times[i]).Allowed
		}
		ns := time.Since(t0).Nanoseconds()
		e.Close()
		if run == 0 || ns < cell.Nanos {
			cell.Nanos = ns
		}
		if got == nil {
			got = out
		} else {
			again = out
		}
	}
	if again != nil && !slices.Equal(got, again) {
		return Cell{}, fmt.Errorf("%s on %s: two replays decided differently", v.Name(), p.Name)
	}

	want := ref.allowed
	wm := make([]WindowMax, len(keys))
	for i := range wm {
		wm[i].Window = int64(c.Window)
	}
	for i, r := range reqs {
		n := int64(r.N)
		switch {
		case got[i] && !want[i]:
			cell.FalseAllows++
		case !got[i] && want[i]:
			cell.FalseDenies++
		}
		switch fits := wm[r.Key].Count(r.T)+n <= c.Limit; {
		case got[i] && !fits:
			cell.EstFalseAllows++
		case !got[i] && fits:
			cell.EstFalseDenies++
		}
		if got[i] {
			cell.Admitted += n
			wm[r.Key].Add(r.T, n)
			if len(keys) == 1 {
				cell.admitted = append(cell.admitted, event{r.T, n})
			}
		}
	}
	for i := range wm {
		cell.WorstUnits = max(cell.WorstUnits, wm[i].Max())
	}
	return cell, nil
}

// measureMemory inserts keys into a fresh engine and divides the growth of
// the live heap (after a GC) by their number. The keys' strings exist
// before the baseline, so they are not counted; the engine's map entry
// and per-key state are. Counter state does not grow with the counts, so
// each counter key gets one request. The log's state can grow with the
// units in its window, so each of its keys is filled to the limit, spread
// over one window, and fewer keys are used when L is large.
func measureMemory(c Config, row *Row, keys []string) error {
	fill := int64(1)
	if row.Kind == Log {
		fill = c.Limit
		keys = keys[:max(1, min(len(keys), int(10_000_000/c.Limit)))]
	}
	base := geometryOf(c).base
	times := make([]time.Time, fill)
	for j := range times {
		times[j] = time.Unix(0, base+int64(j)*int64(c.Window)/fill)
	}
	before := liveHeap()
	e, err := engine.New(c.engineConfig(row.Variant))
	if err != nil {
		return fmt.Errorf("%s: %w", row.Name(), err)
	}
	for _, t := range times {
		for _, k := range keys {
			if !e.AllowAt(k, 1, t).Allowed {
				return fmt.Errorf("%s: memory fill refused a request of key %q", row.Name(), k)
			}
		}
	}
	after := liveHeap()
	if got := e.Len(); got != int64(len(keys)) {
		return fmt.Errorf("%s: %d keys held after inserting %d", row.Name(), got, len(keys))
	}
	runtime.KeepAlive(e)
	e.Close()
	row.BytesPerKey = (float64(after) - float64(before)) / float64(len(keys))
	row.MemKeys, row.MemFill = len(keys), fill
	return nil
}

// liveHeap forces a GC and returns the bytes in live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
