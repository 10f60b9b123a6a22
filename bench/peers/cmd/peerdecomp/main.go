// Command peerdecomp drives one limiter of bench/peers from one goroutine,
// for a fixed number of decisions, so that a deterministic simulator can
// count what one decision costs. It is the workload of `make decompose`
// (docs/benchmarks.md), which runs it twice under valgrind's cachegrind,
// with two decision counts, and divides the difference of the two runs'
// counts by the difference of the decision counts: what the setup (building
// and filling the keys, the runtime's start) costs cancels out.
//
//	peerdecomp -peer ringlimit-sliding-at -keys 1000000 -n 1310720
//	peerdecomp -list
//
// Every key exists before the counted loop (one request each, in order),
// then the loop draws keys uniformly with a xorshift generator seeded the
// same way in every run, as the interleaved harness does, so two runs with
// different -n do the same work up to the shorter one's end.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bench/peers"
)

func main() {
	name := flag.String("peer", "ringlimit-sliding", "the limiter or floor to drive (-list names them)")
	keys := flag.Int("keys", 1_000_000, "number of distinct keys (≥ 1)")
	n := flag.Int("n", 1<<20, "decisions in the counted loop (≥ 0)")
	list := flag.Bool("list", false, "list the limiters and floors, and exit")
	thp := flag.Bool("thp", false, "after the fill, back the Go heap with transparent huge pages (madvise MADV_HUGEPAGE, then MADV_COLLAPSE; Linux only) and report how much of it they hold")
	timed := flag.Bool("time", false, "print the counted loop's wall-clock ns per decision (for ratios between runs only)")
	flag.Parse()

	all := append(slices.Clone(peers.Peers), peers.Floors...)
	if *list {
		for _, p := range all {
			fmt.Printf("%-26s %s\n", p.Name, p.Kind)
		}
		return
	}
	if *keys < 1 || *n < 0 {
		fmt.Fprintln(os.Stderr, "peerdecomp: -keys must be ≥ 1 and -n ≥ 0")
		os.Exit(2)
	}
	i := slices.IndexFunc(all, func(p peers.Peer) bool { return p.Name == *name })
	if i < 0 {
		fmt.Fprintf(os.Stderr, "peerdecomp: no limiter named %q (-list names them)\n", *name)
		os.Exit(2)
	}
	// No collection at all: one started by the fill would run, on its
	// background workers, into the counted loop by an amount that differs
	// between two runs. The counted loop allocates nothing for the
	// limiters that allocate nothing per decision.
	debug.SetGCPercent(-1)
	l := all[i].New(100_000_000_000, time.Hour) // admits everything, as the harness
	defer l.Close()
	ks := peers.KeySet(*keys)
	for _, k := range ks {
		l.Allow(k)
	}

	if *thp {
		if err := hugePages(); err != nil {
			fmt.Fprintln(os.Stderr, "peerdecomp: -thp:", err)
			os.Exit(1)
		}
	}

	start := time.Now()
	x := uint64(0x9e3779b97f4a7c15)
	denied := 0
	for range *n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if !l.Allow(ks[((x>>32)*uint64(len(ks)))>>32]) {
			denied++
		}
	}
	if *timed {
		fmt.Printf("%.1f ns/decision\n", float64(time.Since(start).Nanoseconds())/float64(max(*n, 1)))
	}
	if denied != 0 {
		fmt.Fprintf(os.Stderr, "peerdecomp: %d of %d requests denied (the workload expects every one admitted)\n", denied, *n)
		os.Exit(1)
	}
}
