package accuracy

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Request is one decision of a pattern: N units for Keys[Key] at T (Unix
// ns). A pattern's requests are sorted by time (then key), so every key's
// times are non-decreasing.
type Request struct {
	T   int64
	Key int32
	N   int32
}

// Class groups patterns for the summary columns.
type Class int

const (
	// Smooth: Poisson arrivals, one key or many; the regime where the
	// weighted counter's (1+1/N) rule of thumb is meant to hold.
	Smooth Class = iota
	// Bursty: on/off bursts with some multi-unit requests.
	Bursty
	// Boundary: L at the end of one fixed window, L at the start of the
	// next.
	Boundary
	// Adversarial: L at the last nanosecond of a sub-window, then greedy.
	Adversarial
)

// Pattern is a deterministic stream of requests.
type Pattern struct {
	Name  string // short, a column head
	About string // one line for the report
	Class Class
	Keys  []string
	Reqs  []Request
	// Start and End bound the pattern's timeline (Unix ns), Start aligned
	// to the window so that it starts a fixed window and a sub-window for
	// every N.
	Start, End int64
}

// realistic reports whether the pattern counts towards the precision column:
// the smooth and bursty ones, not the two constructed worst cases.
func (p *Pattern) realistic() bool { return p.Class == Smooth || p.Class == Bursty }

// anchor is the first Unix second the patterns start from (rounded up to a
// whole window), so that the engine sees plausible present-day times.
const anchor = 1_700_000_000 * 1e9

// geometry is what the generators need from the Config.
type geometry struct {
	limit, window int64
	maxN          int64
	base          int64
	seed          uint64
}

func geometryOf(c Config) geometry {
	w := int64(c.Window)
	g := geometry{limit: c.Limit, window: w, base: (anchor + w - 1) / w * w, seed: c.Seed}
	for _, n := range c.SubWindows {
		g.maxN = max(g.maxN, int64(n))
	}
	return g
}

// rng returns the generator of one stream (a pattern, or one tenant).
func (g geometry) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(g.seed, stream))
}

// Patterns builds the lab's patterns from c, in report order. Equal configs
// give equal patterns.
func Patterns(c Config) []*Pattern {
	g := geometryOf(c)
	d := int64(c.PatternWindows) * g.window
	return []*Pattern{
		poissonPattern(g, "Poisson 0.5×", 0.5, d, 1),
		poissonPattern(g, "Poisson 1×", 1, d, 2),
		poissonPattern(g, "Poisson 2×", 2, d, 3),
		onOffPattern(g, d, 4),
		tenantsPattern(g, c.Tenants, int64(c.TenantWindows)*g.window, 5),
		boundaryPattern(g),
		adversarialPattern(g),
	}
}

// arrivals returns the offsets in [0, d) of a Poisson process of rate per
// window.
func arrivals(r *rand.Rand, rate float64, window, d int64) []int64 {
	mean := float64(window) / rate // ns between arrivals
	var out []int64
	for t := r.ExpFloat64() * mean; t < float64(d); t += r.ExpFloat64() * mean {
		out = append(out, int64(t))
	}
	return out
}

func poissonPattern(g geometry, name string, rho float64, d int64, stream uint64) *Pattern {
	p := &Pattern{
		Name:  name,
		About: fmt.Sprintf("one key, Poisson arrivals at %g× the limit rate (%g L per W) for %d W", rho, rho, d/g.window),
		Class: Smooth, Keys: []string{"poisson"}, Start: g.base, End: g.base + d,
	}
	for _, t := range arrivals(g.rng(stream), rho*float64(g.limit), g.window, d) {
		p.Reqs = append(p.Reqs, Request{T: g.base + t, N: 1})
	}
	return p
}

// onOffPattern alternates on phases of 0.1–0.5 W at 3× the limit rate with
// silences of 0.2–1.5 W; one request in ten asks for 2–5 units.
func onOffPattern(g geometry, d int64, stream uint64) *Pattern {
	p := &Pattern{
		Name: "on/off",
		About: fmt.Sprintf("one key, bursts of 0.1–0.5 W at 3× the limit rate separated by 0.2–1.5 W of silence, for %d W; "+
			"one request in ten asks for 2–5 units", d/g.window),
		Class: Bursty, Keys: []string{"onoff"}, Start: g.base, End: g.base + d,
	}
	r := g.rng(stream)
	w := float64(g.window)
	for t := int64(0); t < d; {
		on := int64((0.1 + 0.4*r.Float64()) * w)
		for _, a := range arrivals(r, 3*float64(g.limit), g.window, min(on, d-t)) {
			n := int32(1)
			if r.IntN(10) == 0 {
				n = 2 + int32(r.IntN(4))
			}
			p.Reqs = append(p.Reqs, Request{T: g.base + t + a, N: n})
		}
		t += on + int64((0.2+1.3*r.Float64())*w)
	}
	return p
}

// tenantRate is tenant i's rate, in limits per window: log-spaced from 0.2
// to 3.
func tenantRate(i, n int) float64 {
	if n == 1 {
		return 1
	}
	return 0.2 * math.Pow(15, float64(i)/float64(n-1))
}

func tenantsPattern(g geometry, n int, d int64, stream uint64) *Pattern {
	p := &Pattern{
		Name: "tenants",
		About: fmt.Sprintf("%d keys, each Poisson at its own rate, log-spaced from 0.2× to 3× the limit rate, for %d W; "+
			"metrics aggregate over all keys (worst = the worst key)", n, d/g.window),
		Class: Smooth, Start: g.base, End: g.base + d,
	}
	for i := range n {
		p.Keys = append(p.Keys, fmt.Sprintf("tenant-%04d", i))
		r := g.rng(stream<<32 | uint64(i))
		for _, t := range arrivals(r, tenantRate(i, n)*float64(g.limit), g.window, d) {
			p.Reqs = append(p.Reqs, Request{T: g.base + t, Key: int32(i), N: 1})
		}
	}
	slices.SortFunc(p.Reqs, func(a, b Request) int {
		return cmp.Or(cmp.Compare(a.T, b.T), cmp.Compare(a.Key, b.Key))
	})
	return p
}

// boundaryPattern: L requests spread over the last W/20 before the fixed
// window boundary at Start+W, and L more over the first W/20 after it.
func boundaryPattern(g geometry) *Pattern {
	p := &Pattern{
		Name:  "boundary",
		About: "one key, L requests spread over the last W/20 of one fixed window and L over the first W/20 of the next",
		Class: Boundary, Keys: []string{"boundary"}, Start: g.base, End: g.base + 5*g.window/2,
	}
	span := g.window / 20
	edge := g.base + g.window
	for j := range g.limit {
		p.Reqs = append(p.Reqs, Request{T: edge - span + j*span/g.limit, N: 1})
	}
	for j := range g.limit {
		p.Reqs = append(p.Reqs, Request{T: edge + j*span/g.limit, N: 1})
	}
	return p
}

// adversarialPattern is DESIGN §1's worked example: L requests at the last
// nanosecond of a sub-window (Start+W−1 ns ends a sub-window for every N,
// and a fixed window too), then a greedy stream for 2 W: a request every
// w/(4L) for the smallest sub-window w, so that every unit the weighted
// estimate frees as the burst's weight decays is taken at once.
func adversarialPattern(g geometry) *Pattern {
	greedy := 8 * g.limit * g.maxN // 4L per smallest sub-window, over 2 W
	p := &Pattern{
		Name: "adversarial",
		About: fmt.Sprintf("one key, L requests at the last nanosecond of a sub-window (and of a fixed window), "+
			"then a greedy stream for 2 W (%d requests, one every W/%d)", greedy, greedy/2),
		Class: Adversarial, Keys: []string{"adversarial"}, Start: g.base, End: g.base + 3*g.window,
	}
	burst := g.base + g.window - 1
	for range g.limit {
		p.Reqs = append(p.Reqs, Request{T: burst, N: 1})
	}
	for i := range greedy {
		p.Reqs = append(p.Reqs, Request{T: g.base + g.window + i*2*g.window/greedy, N: 1})
	}
	return p
}
