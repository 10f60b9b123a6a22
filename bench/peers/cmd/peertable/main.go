// Command peertable condenses the go test -bench output of the peer
// comparison into Markdown: for each benchmark (Fast, HalfDenied) a table
// of median ns/op with peers as rows and scenarios as columns, and a table
// of ringlimit's best variant against the best other peer per scenario.
//
// Usage: go run ./cmd/peertable out/raw.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// cell holds the samples of one peer in one scenario of one table.
type cell struct {
	values map[string][]float64 // unit → samples
}

// results holds the parsed lines in order of first appearance.
type results struct {
	tables    []string
	peers     map[string][]string // table → peers
	scenarios map[string][]string // table → scenarios
	cells     map[[3]string]*cell // table, peer, scenario
}

func newResults() *results {
	return &results{peers: map[string][]string{}, scenarios: map[string][]string{}, cells: map[[3]string]*cell{}}
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// parse reads go test -bench output; lines other than
// BenchmarkT/peer=P/scenario=S-N results are ignored.
func (r *results) parse(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the GOMAXPROCS suffix
			}
		}
		parts := strings.Split(strings.TrimPrefix(name, "Benchmark"), "/")
		if len(parts) != 3 || !strings.HasPrefix(parts[1], "peer=") || !strings.HasPrefix(parts[2], "scenario=") {
			continue
		}
		table, peer, scen := parts[0], strings.TrimPrefix(parts[1], "peer="), strings.TrimPrefix(parts[2], "scenario=")
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		r.tables = appendNew(r.tables, table)
		r.peers[table] = appendNew(r.peers[table], peer)
		r.scenarios[table] = appendNew(r.scenarios[table], scen)
		k := [3]string{table, peer, scen}
		c := r.cells[k]
		if c == nil {
			c = &cell{values: map[string][]float64{}}
			r.cells[k] = c
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("%s: value %q: %w", f[0], f[i], err)
			}
			c.values[f[i+1]] = append(c.values[f[i+1]], v)
		}
	}
	return sc.Err()
}

func median(v []float64) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

func (r *results) med(table, peer, scen, unit string) (float64, bool) {
	c := r.cells[[3]string{table, peer, scen}]
	if c == nil {
		return 0, false
	}
	return median(c.values[unit])
}

// comparable reports whether a half-denied cell admitted a share of
// requests close enough to one half to compare its cost with the others.
func (r *results) comparable(table, peer, scen string) bool {
	a, ok := r.med(table, peer, scen, "allowed/op")
	if !ok {
		return true
	}
	return table == "Fast" || (a >= 0.25 && a <= 0.75)
}

func fmtNs(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func (r *results) write(w io.Writer) {
	for _, t := range r.tables {
		scens := r.scenarios[t]
		runs := 0
		for _, c := range r.cells {
			runs = max(runs, len(c.values["ns/op"]))
		}
		fmt.Fprintf(w, "### Benchmark%s: median ns/op of %d runs", t, runs)
		if t != "Fast" {
			fmt.Fprintf(w, ", with the median share admitted (allowed/op)")
		}
		fmt.Fprintf(w, "; allocs/op in brackets where not 0\n\n| peer |")
		for _, s := range scens {
			fmt.Fprintf(w, " %s |", s)
		}
		fmt.Fprintf(w, "\n|---|")
		for range scens {
			fmt.Fprintf(w, "---:|")
		}
		fmt.Fprintln(w)
		for _, p := range r.peers[t] {
			fmt.Fprintf(w, "| %s |", p)
			for _, s := range scens {
				ns, ok := r.med(t, p, s, "ns/op")
				if !ok {
					fmt.Fprintf(w, " – |")
					continue
				}
				txt := fmtNs(ns)
				if t != "Fast" {
					if a, ok := r.med(t, p, s, "allowed/op"); ok {
						txt += fmt.Sprintf(" · %.2f", a)
						if !r.comparable(t, p, s) {
							txt += "*"
						}
					}
				}
				if al, ok := r.med(t, p, s, "allocs/op"); ok && al != 0 {
					txt += fmt.Sprintf(" [%g]", al)
				}
				fmt.Fprintf(w, " %s |", txt)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
		if t != "Fast" {
			fmt.Fprintf(w, "\\* admitted share outside 0.25–0.75: not comparable, left out of the comparison below.\n\n")
		}

		fmt.Fprintf(w, "ringlimit's fastest variant against the fastest other peer (Benchmark%s):\n\n", t)
		fmt.Fprintf(w, "| scenario | ringlimit (best) | ns/op | best other peer | ns/op | peer ns / ringlimit ns |\n|---|---|---:|---|---:|---:|\n")
		for _, s := range scens {
			var bestR, bestP string
			var nsR, nsP float64
			for _, p := range r.peers[t] {
				ns, ok := r.med(t, p, s, "ns/op")
				if !ok || !r.comparable(t, p, s) {
					continue
				}
				if strings.HasPrefix(p, "ringlimit") {
					if bestR == "" || ns < nsR {
						bestR, nsR = p, ns
					}
				} else if bestP == "" || ns < nsP {
					bestP, nsP = p, ns
				}
			}
			if bestR == "" || bestP == "" {
				fmt.Fprintf(w, "| %s | – | – | – | – | – |\n", s)
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.2f× |\n", s, bestR, fmtNs(nsR), bestP, fmtNs(nsP), nsP/nsR)
		}
		fmt.Fprintln(w)
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peertable raw.txt...")
		os.Exit(2)
	}
	r := newResults()
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		err = r.parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, name+":", err)
			os.Exit(1)
		}
	}
	if len(r.tables) == 0 {
		fmt.Fprintln(os.Stderr, "peertable: no peer benchmark lines found")
		os.Exit(1)
	}
	r.write(os.Stdout)
}
