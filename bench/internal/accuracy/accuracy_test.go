package accuracy

import (
	"cmp"
	"encoding/xml"
	"errors"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestExactLog checks the reference on hand-computed cases.
func TestExactLog(t *testing.T) {
	type step struct {
		t, n int64
		want bool
	}
	for _, tc := range []struct {
		name          string
		limit, window int64
		steps         []step
	}{
		{
			// (t−W, t] is half-open: the event at 0 has left the window at 10.
			name: "half-open window", limit: 2, window: 10,
			steps: []step{{0, 1, true}, {5, 1, true}, {9, 1, false}, {10, 1, true}, {14, 1, false}, {15, 1, true}},
		},
		{
			name: "same instant", limit: 3, window: 1000,
			steps: []step{{7, 1, true}, {7, 1, true}, {7, 1, true}, {7, 1, false}, {1006, 1, false}, {1007, 1, true}},
		},
		{
			// Units: a refused request records nothing, so a smaller one fits.
			name: "units", limit: 10, window: 100,
			steps: []step{{0, 6, true}, {50, 5, false}, {60, 4, true}, {99, 1, false}, {100, 6, true}, {159, 1, false}, {160, 4, true}},
		},
		{
			name: "n above the limit, and n ≤ 0", limit: 2, window: 10,
			steps: []step{{0, 3, false}, {0, 0, false}, {0, -1, false}, {1, 2, true}},
		},
		{
			// Only its own admissions count: the refusals in between never
			// extend anything.
			name: "refusals do not count", limit: 1, window: 10,
			steps: []step{{0, 1, true}, {3, 1, false}, {6, 1, false}, {9, 1, false}, {10, 1, true}, {19, 1, false}, {20, 1, true}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewExactLog(tc.limit, tc.window)
			for i, s := range tc.steps {
				if got := l.Allow(s.t, s.n); got != s.want {
					t.Fatalf("step %d: Allow(%d, %d) = %v, want %v", i, s.t, s.n, got, s.want)
				}
			}
		})
	}
	l := NewExactLog(5, 10)
	for _, ts := range []int64{0, 2, 4, 4} {
		l.Allow(ts, 1)
	}
	for _, c := range []struct{ t, want int64 }{{4, 4}, {10, 3}, {12, 2}, {14, 0}} {
		if got := l.Count(c.t); got != c.want {
			t.Errorf("Count(%d) = %d, want %d", c.t, got, c.want)
		}
	}
}

// TestWindowMax checks the two-pointer maximum against a quadratic count,
// across the queue's compaction.
func TestWindowMax(t *testing.T) {
	const window = 1000
	m := WindowMax{Window: window}
	var evs []event
	for i := range int64(20_000) {
		e := event{t: i * 7 / 3, n: 1 + i%3}
		if i%5 == 0 || i%7 == 0 {
			evs = append(evs, e)
			m.Add(e.t, e.n)
		}
	}
	var want int64
	for i, end := range evs {
		var s int64
		for j := i; j >= 0 && evs[j].t > end.t-window; j-- {
			s += evs[j].n
		}
		want = max(want, s)
	}
	if m.Max() != want {
		t.Errorf("max = %d, want %d", m.Max(), want)
	}
}

// TestPatternsDeterministic: the same config gives the same requests, a
// different seed different random ones, and every pattern is well formed.
func TestPatternsDeterministic(t *testing.T) {
	c := QuickConfig()
	a, b := Patterns(c), Patterns(c)
	c2 := c
	c2.Seed++
	other := Patterns(c2)
	if len(a) != 7 {
		t.Fatalf("%d patterns, want 7", len(a))
	}
	g := geometryOf(c)
	if g.base%int64(c.Window) != 0 {
		t.Errorf("base %d is not aligned to the window", g.base)
	}
	for i, p := range a {
		if !reflect.DeepEqual(p, b[i]) {
			t.Errorf("%s: two generations differ", p.Name)
		}
		random := p.Class == Smooth || p.Class == Bursty
		if same := reflect.DeepEqual(p.Reqs, other[i].Reqs); same == random {
			t.Errorf("%s: another seed gives the same requests = %v, want %v", p.Name, same, !random)
		}
		if len(p.Reqs) == 0 || len(p.Keys) == 0 || p.Start != g.base {
			t.Fatalf("%s: %d requests, %d keys, start %d", p.Name, len(p.Reqs), len(p.Keys), p.Start)
		}
		if !slices.IsSortedFunc(p.Reqs, func(x, y Request) int { return cmp.Compare(x.T, y.T) }) {
			t.Errorf("%s: requests not in time order", p.Name)
		}
		for _, r := range p.Reqs {
			if r.T < p.Start || r.T >= p.End || r.N < 1 || int64(r.N) > c.Limit || r.Key < 0 || int(r.Key) >= len(p.Keys) {
				t.Fatalf("%s: bad request %+v", p.Name, r)
			}
		}
	}
	// The tenants span 0.2× to 3× the limit rate.
	if lo, hi := tenantRate(0, 1000), tenantRate(999, 1000); lo != 0.2 || hi < 2.999 || hi > 3.001 {
		t.Errorf("tenant rates %v … %v, want 0.2 … 3", lo, hi)
	}
	// The adversarial burst is L requests at the last nanosecond of a window.
	adv := a[6]
	if adv.Class != Adversarial || adv.Reqs[0].T != g.base+int64(c.Window)-1 || adv.Reqs[c.Limit-1].T != adv.Reqs[0].T || adv.Reqs[c.Limit].T != g.base+int64(c.Window) {
		t.Errorf("adversarial pattern starts %+v", adv.Reqs[:c.Limit+1])
	}
	// The Poisson rates are roughly right: 0.5, 1 and 2 L per W.
	for i, rho := range []float64{0.5, 1, 2} {
		want := rho * float64(c.Limit) * float64(c.PatternWindows)
		if got := float64(len(a[i].Reqs)); got < 0.8*want || got > 1.2*want {
			t.Errorf("%s: %v requests, want about %v", a[i].Name, got, want)
		}
	}
}

var (
	quickOnce sync.Once
	quickRes  *Result
	quickErr  error
)

// quick runs the lab once on QuickConfig for every test that needs it.
func quick(t *testing.T) *Result {
	t.Helper()
	quickOnce.Do(func() { quickRes, quickErr = Run(QuickConfig(), io.Discard) })
	if quickErr != nil {
		t.Fatal(quickErr)
	}
	return quickRes
}

// TestLabBounds checks docs/design.md §1's bounds on what each algorithm admitted in
// one true window, and that the adversarial burst drives the weighted
// counter to nearly 2L for every N.
func TestLabBounds(t *testing.T) {
	res := quick(t)
	L := res.Config.Limit
	kinds := map[Kind]int{}
	for _, r := range res.Rows {
		kinds[r.Kind]++
		if len(r.Cells) != len(res.Patterns) {
			t.Fatalf("%s: %d cells for %d patterns", r.Name(), len(r.Cells), len(res.Patterns))
		}
		for i, c := range r.Cells {
			p := res.Patterns[i]
			if c.Decisions != int64(len(p.Reqs)) || c.Admitted == 0 || c.Nanos <= 0 {
				t.Errorf("%s on %s: %d decisions, %d admitted, %d ns", r.Name(), p.Name, c.Decisions, c.Admitted, c.Nanos)
			}
			switch r.Kind {
			case Strict:
				if c.WorstUnits > L {
					t.Errorf("%s on %s: %d units in one window, want ≤ L = %d", r.Name(), p.Name, c.WorstUnits, L)
				}
			case Fixed:
				if c.WorstUnits > 2*L {
					t.Errorf("%s on %s: %d units in one window, want ≤ 2L", r.Name(), p.Name, c.WorstUnits)
				}
			case Sliding:
				if c.WorstUnits >= 2*L {
					t.Errorf("%s on %s: %d units in one window, want < 2L", r.Name(), p.Name, c.WorstUnits)
				}
				if p.Class == Adversarial && c.WorstUnits*10 < 19*L {
					t.Errorf("%s on the adversarial burst: %d units in one window, want ≥ 1.9 L", r.Name(), c.WorstUnits)
				}
			case Token:
				// Burst + ⌊W·L/W⌋ = 2L in a window of length W.
				if c.WorstUnits > 2*L {
					t.Errorf("%s on %s: %d units in one window, want ≤ Burst + L = 2L", r.Name(), p.Name, c.WorstUnits)
				}
			case Log:
				if c.WorstUnits > L || c.FalseAllows != 0 || c.FalseDenies != 0 {
					t.Errorf("sliding log on %s: worst %d, false allows %d, false denies %d; want ≤ L and exact",
						p.Name, c.WorstUnits, c.FalseAllows, c.FalseDenies)
				}
			}
		}
		if r.BytesPerKey <= 0 || r.MemKeys <= 0 {
			t.Errorf("%s: %v bytes/key over %d keys", r.Name(), r.BytesPerKey, r.MemKeys)
		}
	}
	n := len(res.Config.SubWindows)
	if kinds[Fixed] != 1 || kinds[Sliding] != n || kinds[Strict] != n || kinds[Token] != 1 {
		t.Errorf("rows by kind = %v", kinds)
	}
	if kinds[Log] == 0 {
		t.Logf("no engine sliding log: %s", res.LogNote)
		if res.LogNote == "" {
			t.Error("the log row is missing without a note")
		}
	}
	// Fixed admits 2L at the boundary; the reference never exceeds L.
	for i, p := range res.Patterns {
		if res.Reference[i].WorstUnits > L {
			t.Errorf("exact log on %s: %d units in one window", p.Name, res.Reference[i].WorstUnits)
		}
		if p.Class == Boundary {
			if got := res.row(Fixed).Cells[i].WorstUnits; got != 2*L {
				t.Errorf("fixed on the boundary burst: %d units in one window, want 2L = %d", got, 2*L)
			}
		}
	}
}

// TestFigureSVG checks that the chart is well-formed XML with a limit line,
// a legend and one path per series in each panel.
func TestFigureSVG(t *testing.T) {
	res := quick(t)
	svg := res.Figure().SVG()
	if len(svg) > 100_000 {
		t.Errorf("SVG is %d bytes, want it small", len(svg))
	}
	dec := xml.NewDecoder(strings.NewReader(string(svg)))
	var panels, limits, legends int
	paths := map[int]int{}
	var names []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := func(name string) string {
			for _, a := range se.Attr {
				if a.Name.Local == name {
					return a.Value
				}
			}
			return ""
		}
		switch {
		case se.Name.Local == "g" && attr("class") == "panel":
			panels++
		case se.Name.Local == "g" && attr("class") == "legend":
			legends++
		case se.Name.Local == "line" && attr("class") == "limit":
			limits++
		case se.Name.Local == "path" && attr("class") == "series":
			paths[panels]++
			if panels == 1 {
				names = append(names, attr("data-name"))
			}
			if !strings.HasPrefix(attr("d"), "M") {
				t.Errorf("series %q has an empty path", attr("data-name"))
			}
		}
	}
	want := 5
	if panels != 2 || limits != 2 || legends != 1 {
		t.Errorf("%d panels, %d limit lines, %d legends; want 2, 2, 1", panels, limits, legends)
	}
	for p := 1; p <= panels; p++ {
		if paths[p] != want {
			t.Errorf("panel %d has %d series paths, want %d (%v)", p, paths[p], want, names)
		}
	}
	for _, s := range []string{"fixed window", "strict, N=10", "sliding counter, N=10", "log", "token bucket"} {
		if !strings.Contains(strings.Join(names, "|"), s) {
			t.Errorf("series %v lack %q", names, s)
		}
	}
	if !strings.Contains(string(svg), "L = 100") {
		t.Error("the limit line is not labelled")
	}
}

// TestMarkdownDeterministic: two runs with one config give the same report
// except for the two measured columns.
func TestMarkdownDeterministic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick lab twice")
	}
	res := quick(t)
	again, err := Run(QuickConfig(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := Meta{Command: "cmd", Machine: "machine", Date: "today"}
	a, b := mask(res.Markdown(m, "x.svg")), mask(again.Markdown(m, "x.svg"))
	if got := strings.Count(a, " X | **"); got != len(res.Rows) {
		t.Errorf("masked %d table rows, want %d:\n%s", got, len(res.Rows), a)
	}
	if a != b {
		t.Errorf("reports differ:\n%s\n----\n%s", a, b)
	}
	if !strings.Contains(a, "| fixed window |") || !strings.Contains(a, "(1+1/N)") {
		t.Errorf("report lacks the table or the bound:\n%s", a)
	}
	if string(res.Figure().SVG()) != string(again.Figure().SVG()) {
		t.Error("the figures differ")
	}
}

// mask blanks the bytes/key and ns/decision columns of the summary table.
func mask(md string) string {
	row := regexp.MustCompile(`(?m)^(\|(?: [^|]+ \|){4}) [0-9.-]+ (\|(?: [^|]+ \|){5}) [0-9.]+ (\|.*)$`)
	return row.ReplaceAllString(md, "$1 X $2 X $3")
}

func TestNiceTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		most   int
		want   []float64
	}{
		{0, 3, 10, []float64{0, 0.5, 1, 1.5, 2, 2.5, 3}},
		{0, 220, 6, []float64{0, 50, 100, 150, 200}},
		{0, 1, 4, []float64{0, 0.25, 0.5, 0.75, 1}},
	} {
		if got := niceTicks(c.lo, c.hi, c.most); !reflect.DeepEqual(got, c.want) {
			t.Errorf("niceTicks(%v, %v, %d) = %v, want %v", c.lo, c.hi, c.most, got, c.want)
		}
	}
}

func TestTrace(t *testing.T) {
	// Events at 1 s (2 units) and 1.5 s (1 unit), W = 1 s, start 0.
	got := trace([]event{{1e9, 2}, {15e8, 1}}, 1e9, 0)
	want := []Point{{0, 0}, {1, 2}, {1.5, 3}, {2, 1}, {2.5, 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("trace = %v, want %v", got, want)
	}
}
