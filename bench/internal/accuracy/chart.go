package accuracy

import (
	"cmp"
	"fmt"
	"slices"
)

// ChartN is the N of the counters drawn in the figure.
const ChartN = 10

// trace is the step function of the units admitted in the trailing window
// (t−W, t]: an event at s counts from s on, and no longer at s+W. Times are
// in seconds since start.
func trace(events []event, window, start int64) []Point {
	type change struct{ t, d int64 }
	cs := make([]change, 0, 2*len(events))
	for _, e := range events {
		cs = append(cs, change{e.t, e.n}, change{e.t + window, -e.n})
	}
	slices.SortStableFunc(cs, func(a, b change) int { return cmp.Compare(a.t, b.t) })
	pts := []Point{{X: 0, Y: 0}}
	var v int64
	for i, c := range cs {
		v += c.d
		if i+1 < len(cs) && cs[i+1].t == c.t {
			continue // one step per instant
		}
		pts = append(pts, Point{X: float64(c.t-start) / 1e9, Y: float64(v)})
	}
	return pts
}

// chartSeries picks the drawn algorithms: the sliding log (the engine's,
// or the lab's exact log when the engine has none), strict and sliding at
// ChartN (or the first N configured), fixed, and the token bucket. The log is drawn first,
// wide and pale, and strict last, dashed, so that lines that coincide stay
// visible.
func chartSeries(res *Result, pattern int) []Series {
	n := res.Config.SubWindows[0]
	if slices.Contains(res.Config.SubWindows, ChartN) {
		n = ChartN
	}
	p := res.Patterns[pattern]
	w := int64(res.Config.Window)
	find := func(k Kind, n int) *Row {
		for _, r := range res.Rows {
			if r.Kind == k && r.N == n {
				return r
			}
		}
		return nil
	}
	var out []Series
	if r := find(Log, 0); r != nil {
		out = append(out, Series{Name: "sliding log", Color: "#2ca02c", Width: 5, Opacity: 0.45, Steps: trace(r.Cells[pattern].admitted, w, p.Start)})
	} else {
		out = append(out, Series{Name: "exact log (lab reference)", Color: "#2ca02c", Width: 5, Opacity: 0.45, Steps: trace(res.Reference[pattern].admitted, w, p.Start)})
	}
	if r := find(Sliding, n); r != nil {
		out = append(out, Series{Name: fmt.Sprintf("sliding counter, N=%d", n), Color: "#d62728", Width: 1.6, Steps: trace(r.Cells[pattern].admitted, w, p.Start)})
	}
	if r := find(Fixed, 0); r != nil {
		out = append(out, Series{Name: "fixed window", Color: "#ff7f0e", Width: 1.6, Steps: trace(r.Cells[pattern].admitted, w, p.Start)})
	}
	if r := find(Token, 0); r != nil {
		out = append(out, Series{Name: "token bucket, Burst = L", Color: "#9467bd", Width: 1.6, Steps: trace(r.Cells[pattern].admitted, w, p.Start)})
	}
	if r := find(Strict, n); r != nil {
		out = append(out, Series{Name: fmt.Sprintf("strict, N=%d", n), Color: "#1f77b4", Width: 2, Dash: "7 4", Steps: trace(r.Cells[pattern].admitted, w, p.Start)})
	}
	return out
}

// Figure draws, for the boundary and the adversarial patterns, the units
// each drawn algorithm admitted in the trailing window over time, with the
// limit L and 2L.
func (res *Result) Figure() Figure {
	c := res.Config
	L := float64(c.Limit)
	ws := c.Window.Seconds()
	f := Figure{
		Title:       "Units admitted in the trailing window (t−W, t], per algorithm",
		Subtitle:    fmt.Sprintf("L = %d per W = %v; one key; dotted lines mark fixed-window boundaries", c.Limit, c.Window),
		Width:       820,
		PanelHeight: 300,
	}
	titles := map[Class]string{
		Boundary:    "Boundary burst: L at the end of one fixed window, L at the start of the next",
		Adversarial: "Adversarial burst: L at the last nanosecond of a sub-window, then greedy requests",
	}
	for i, p := range res.Patterns {
		if p.Class != Boundary && p.Class != Adversarial {
			continue
		}
		span := float64(p.End-p.Start) / 1e9
		panel := Panel{
			Title:  titles[p.Class],
			XLabel: "time since the pattern's start (s)",
			YLabel: "admitted in (t−W, t]",
			X0:     0, X1: span, Y0: 0, Y1: 2.2 * L,
			YTicks: []float64{0, L / 2, L, 1.5 * L, 2 * L},
			HLines: []HLine{
				{Y: L, Label: fmt.Sprintf("L = %d", c.Limit), Class: "limit", Color: "#000000", Dash: "5 3"},
				{Y: 2 * L, Label: "2L", Class: "twice-limit", Color: "#888888", Dash: "2 3"},
			},
			Series: chartSeries(res, i),
		}
		for k := 1; float64(k)*ws < span; k++ {
			label := "W"
			if k > 1 {
				label = fmt.Sprintf("%dW", k)
			}
			panel.VLines = append(panel.VLines, VLine{X: float64(k) * ws, Label: label})
		}
		f.Panels = append(f.Panels, panel)
	}
	return f
}
