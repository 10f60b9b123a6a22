package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/ringlimit/ringlimit/bench/peers"
)

// goalTable writes issue 23's goal table for s: per scenario, the default
// configuration (engine.Config{Limit, Window}: ringlimit-sliding, and
// ringlimit-strict for Strict) over the best peer, the fastest
// configuration of the algorithm over the best peer, and AllowAt
// (ringlimit-sliding-at) over floor-sum11. Each is the median of the
// per-round ratios [min–max]; "fastest" and "best" are taken per round.
func goalTable(s *peers.Samples, w io.Writer) {
	var others []string
	for _, p := range s.Peers {
		if !strings.HasPrefix(p, "ringlimit") && !s.IsFloor(p) {
			others = append(others, p)
		}
	}
	if len(others) == 0 {
		return
	}
	fmt.Fprintf(w, "### Goals (issue 23): median of per-round ratios [min–max]\n\n")
	fmt.Fprintf(w, "Default = `engine.Config{Limit, Window}` and nothing else; fastest = the fastest of the algorithm's configurations in each round (default clock, 1ms coarse clock, and for sliding AllowAt and ExpectedKeys 1,000,000); best peer = the fastest non-ringlimit limiter in each round. Goals: default ÷ best < 1.0 everywhere and ≤ 0.9 at 1M keys; fastest ≤ 0.5 on one key and 1k keys; AllowAt ÷ floor-sum11 ≤ 1.25 on a hot key and ≤ 1.1 at 1M keys.\n\n")
	fmt.Fprintf(w, "| scenario | sliding default ÷ best peer | sliding fastest ÷ best peer | AllowAt ÷ floor-sum11 | strict default ÷ best peer | strict fastest ÷ best peer | best peer (most rounds) |\n|---|--:|--:|--:|--:|--:|---|\n")
	for _, sc := range s.Scenarios {
		def, who := s.RatioToBest("ringlimit-sliding", others, sc)
		fast := fastestToBest(s, []string{"ringlimit-sliding", "ringlimit-sliding-coarse", "ringlimit-sliding-at", "ringlimit-sliding-1m"}, others, sc)
		at := peers.Spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
		if slices.Contains(s.Peers, "floor-sum11") {
			at = s.Ratio("ringlimit-sliding-at", "floor-sum11", sc)
		}
		sdef, _ := s.RatioToBest("ringlimit-strict", others, sc)
		sfast := fastestToBest(s, []string{"ringlimit-strict", "ringlimit-strict-coarse"}, others, sc)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", sc, sp(def), sp(fast), sp(at), sp(sdef), sp(sfast), who)
	}
	fmt.Fprintln(w)
}

// fastestToBest is the spread over rounds of min(ns of configs) ÷ min(ns
// of others).
func fastestToBest(s *peers.Samples, configs, others []string, sc string) peers.Spread {
	low := func(names []string, r int) float64 {
		m := math.Inf(1)
		for _, n := range names {
			if x := s.NsOp[peers.CellKey(n, sc)]; r < len(x) {
				m = min(m, x[r])
			}
		}
		return m
	}
	var v []float64
	for r := range s.Rounds {
		a, b := low(configs, r), low(others, r)
		if !math.IsInf(a, 1) && !math.IsInf(b, 1) {
			v = append(v, a/b)
		}
	}
	return spreadOfRounds(v)
}

func spreadOfRounds(v []float64) peers.Spread {
	if len(v) == 0 {
		return peers.Spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return peers.Spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

func sp(s peers.Spread) string {
	if math.IsNaN(s.Median) {
		return "–"
	}
	return fmt.Sprintf("%s [%s–%s]", fr(s.Median), fr(s.Min), fr(s.Max))
}
