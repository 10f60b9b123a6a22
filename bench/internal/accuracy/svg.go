package accuracy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A small SVG renderer for step charts: stacked panels sharing one legend,
// each with axes, ticks, labels, horizontal reference lines and step
// series. Standard library only; the output is plain SVG 1.1 with inline
// attributes, so browsers, GitHub and rsvg all draw it alike.

// Point is one step of a series: the value Y holds from X until the next
// point's X.
type Point struct{ X, Y float64 }

// Series is one line.
type Series struct {
	Name    string
	Color   string
	Dash    string  // stroke-dasharray, or ""
	Width   float64 // stroke width, px
	Opacity float64 // 0 means 1
	Steps   []Point
}

// HLine is a horizontal reference line with a label at its right end.
type HLine struct {
	Y     float64
	Label string
	Class string // "limit" for the limit line
	Color string
	Dash  string
}

// VLine is a vertical guide with a label at its top.
type VLine struct {
	X     float64
	Label string
}

// Panel is one plot.
type Panel struct {
	Title          string
	XLabel, YLabel string
	X0, X1, Y0, Y1 float64
	XTicks, YTicks []float64 // nil: chosen automatically
	VLines         []VLine
	HLines         []HLine
	Series         []Series
}

// Figure is a stack of panels.
type Figure struct {
	Title       string
	Subtitle    string
	Width       int // px
	PanelHeight int // px
	Panels      []Panel
}

// Layout constants, px.
const (
	marginLeft   = 70
	marginRight  = 64
	headHeight   = 78 // title, subtitle, legend
	panelTop     = 30 // panel title above the plot
	panelBottom  = 48 // ticks and the x label below it
	fontSize     = 12
	charWidthEst = 6.6 // average glyph advance at fontSize, for laying out the legend
)

// SVG renders f.
func (f Figure) SVG() []byte {
	var b strings.Builder
	height := headHeight + len(f.Panels)*f.PanelHeight + 8
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="%d">`+"\n",
		f.Width, height, f.Width, height, fontSize)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(f.Title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", f.Width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, esc(f.Title))
	if f.Subtitle != "" {
		fmt.Fprintf(&b, `<text x="%d" y="40" fill="#444444">%s</text>`+"\n", marginLeft, esc(f.Subtitle))
	}
	f.legend(&b, 62)
	for i, p := range f.Panels {
		f.panel(&b, i, p, headHeight+i*f.PanelHeight)
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// legend draws one entry per series of the first panel, in one row.
func (f Figure) legend(b *strings.Builder, y int) {
	if len(f.Panels) == 0 {
		return
	}
	b.WriteString(`<g class="legend">` + "\n")
	x := float64(marginLeft)
	for _, s := range f.Panels[0].Series {
		fmt.Fprintf(b, `<line x1="%s" y1="%d" x2="%s" y2="%d"%s/>`, num(x), y-4, num(x+26), y-4, stroke(s))
		fmt.Fprintf(b, `<text x="%s" y="%d">%s</text>`+"\n", num(x+32), y, esc(s.Name))
		x += 32 + charWidthEst*float64(len([]rune(s.Name))) + 22
	}
	b.WriteString("</g>\n")
}

func stroke(s Series) string {
	a := fmt.Sprintf(` stroke="%s" stroke-width="%s" fill="none"`, s.Color, num(s.Width))
	if s.Dash != "" {
		a += fmt.Sprintf(` stroke-dasharray="%s"`, s.Dash)
	}
	if s.Opacity > 0 && s.Opacity < 1 {
		a += fmt.Sprintf(` stroke-opacity="%s"`, num(s.Opacity))
	}
	return a
}

func (f Figure) panel(b *strings.Builder, idx int, p Panel, top int) {
	left, right := float64(marginLeft), float64(f.Width-marginRight)
	pt, pb := float64(top+panelTop), float64(top+f.PanelHeight-panelBottom)
	sx := func(x float64) float64 { return left + (x-p.X0)/(p.X1-p.X0)*(right-left) }
	sy := func(y float64) float64 { return pb - (y-p.Y0)/(p.Y1-p.Y0)*(pb-pt) }
	xt, yt := p.XTicks, p.YTicks
	if xt == nil {
		xt = niceTicks(p.X0, p.X1, 10)
	}
	if yt == nil {
		yt = niceTicks(p.Y0, p.Y1, 6)
	}

	fmt.Fprintf(b, `<g class="panel" id="panel-%d">`+"\n", idx)
	fmt.Fprintf(b, `<text x="%s" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", num(left), top+panelTop-10, esc(p.Title))
	fmt.Fprintf(b, `<defs><clipPath id="clip-%d"><rect x="%s" y="%s" width="%s" height="%s"/></clipPath></defs>`+"\n",
		idx, num(left), num(pt-2), num(right-left), num(pb-pt+4))
	// Grid and ticks.
	b.WriteString(`<g class="grid" stroke="#e6e6e6" stroke-width="1">`)
	for _, y := range yt {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(left), num(sy(y)), num(right), num(sy(y)))
	}
	b.WriteString("</g>\n")
	for _, v := range p.VLines {
		x := sx(v.X)
		fmt.Fprintf(b, `<line class="guide" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#b0b0b0" stroke-dasharray="2 3"/>`, num(x), num(pt), num(x), num(pb))
		fmt.Fprintf(b, `<text x="%s" y="%s" fill="#777777" text-anchor="middle" font-size="11">%s</text>`+"\n", num(x), num(pt-1), esc(v.Label))
	}
	// Axes.
	fmt.Fprintf(b, `<g class="axes" stroke="#333333" stroke-width="1"><line x1="%s" y1="%s" x2="%s" y2="%s"/><line x1="%s" y1="%s" x2="%s" y2="%s"/>`,
		num(left), num(pb), num(right), num(pb), num(left), num(pt), num(left), num(pb))
	for _, x := range xt {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(sx(x)), num(pb), num(sx(x)), num(pb+5))
	}
	for _, y := range yt {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(left-5), num(sy(y)), num(left), num(sy(y)))
	}
	b.WriteString("</g>\n")
	b.WriteString(`<g class="ticklabels" fill="#333333">`)
	for _, x := range xt {
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`, num(sx(x)), num(pb+18), tickLabel(x))
	}
	for _, y := range yt {
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end">%s</text>`, num(left-8), num(sy(y)+4), tickLabel(y))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<text class="xlabel" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num((left+right)/2), num(pb+38), esc(p.XLabel))
	cy := (pt + pb) / 2
	fmt.Fprintf(b, `<text class="ylabel" x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text>`+"\n",
		num(left-46), num(cy), num(left-46), num(cy), esc(p.YLabel))
	// Reference lines.
	for _, h := range p.HLines {
		y := sy(h.Y)
		a := fmt.Sprintf(` stroke="%s" stroke-width="1.2"`, h.Color)
		if h.Dash != "" {
			a += fmt.Sprintf(` stroke-dasharray="%s"`, h.Dash)
		}
		fmt.Fprintf(b, `<line class="%s" x1="%s" y1="%s" x2="%s" y2="%s"%s/>`, esc(h.Class), num(left), num(y), num(right), num(y), a)
		fmt.Fprintf(b, `<text x="%s" y="%s" fill="%s">%s</text>`+"\n", num(right+4), num(y+4), h.Color, esc(h.Label))
	}
	// Series.
	fmt.Fprintf(b, `<g clip-path="url(#clip-%d)">`+"\n", idx)
	for _, s := range p.Series {
		fmt.Fprintf(b, `<path class="series" data-name="%s" d="%s"%s stroke-linejoin="round"/>`+"\n", esc(s.Name), stepPath(s.Steps, p, sx, sy), stroke(s))
	}
	b.WriteString("</g>\n</g>\n")
}

// stepPath draws a step function as M, H and V commands on a 0.1 px grid.
// Points outside [X0, X1] are clipped; at one x, a run of vertical moves
// in one direction collapses to its end, so the path stays small while
// every excursion (even one nanosecond long) stays visible.
func stepPath(pts []Point, p Panel, sx, sy func(float64) float64) string {
	type xy struct{ x, y float64 }
	var seq []xy
	for i, pt := range pts {
		if pt.X > p.X1 {
			break
		}
		if i+1 < len(pts) && pts[i+1].X <= p.X0 {
			continue // superseded before the panel starts
		}
		x := round1(sx(max(pt.X, p.X0)))
		y := round1(sy(pt.Y))
		if n := len(seq); n > 0 && seq[n-1].y == y {
			continue // no change of value
		}
		// After "H x" the pen stands at (x, seq[n-2].y): a vertical run at x
		// that keeps its direction collapses to its end.
		if n := len(seq); n >= 2 && seq[n-1].x == x &&
			(seq[n-2].y < seq[n-1].y) == (seq[n-1].y < y) {
			seq[n-1].y = y
			continue
		}
		seq = append(seq, xy{x, y})
	}
	if len(seq) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "M%s %s", num(seq[0].x), num(seq[0].y))
	cx := seq[0].x
	for _, q := range seq[1:] {
		if q.x != cx {
			fmt.Fprintf(&b, "H%s", num(q.x))
			cx = q.x
		}
		fmt.Fprintf(&b, "V%s", num(q.y))
	}
	fmt.Fprintf(&b, "H%s", num(round1(sx(p.X1))))
	return b.String()
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// num formats a coordinate with at most one decimal.
func num(v float64) string {
	return strconv.FormatFloat(round1(v), 'f', -1, 64)
}

// tickLabel formats a tick value briefly.
func tickLabel(v float64) string {
	v = math.Round(v*1e6) / 1e6
	if v == 0 {
		v = 0 // not −0
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// niceTicks returns ticks at a step of 1, 2, 2.5 or 5 × 10^k covering
// [lo, hi] with at most max+1 ticks.
func niceTicks(lo, hi float64, most int) []float64 {
	if !(hi > lo) || most < 1 {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(most)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+1e-9*step; i++ {
		v := i * step
		if v == 0 {
			v = 0 // not −0
		}
		ticks = append(ticks, v)
	}
	return ticks
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

func esc(s string) string { return escaper.Replace(s) }
