//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// madvCollapse is MADV_COLLAPSE (Linux 6.1): collapse the range into huge
// pages now, rather than when khugepaged gets to it.
const madvCollapse = 25

// hugePages advises every writable anonymous mapping of the process (the
// Go heap among them) to use transparent huge pages and collapses it, then
// prints how much of the process's memory huge pages hold. With THP on
// "madvise" (this machine's setting) the Go runtime does not ask for them
// itself, so this is what the deployment knob would change.
func hugePages() error {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return err
	}
	defer f.Close()
	type span struct{ lo, hi uintptr }
	var spans []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 || !strings.HasPrefix(fs[1], "rw") || len(fs) > 5 && fs[5] != "" {
			continue // not writable, or file-backed or named ([stack], [heap] …)
		}
		lo, hi, _ := strings.Cut(fs[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || b-a < 2<<20 {
			continue
		}
		spans = append(spans, span{uintptr(a), uintptr(b)})
	}
	for _, s := range spans {
		// A raw syscall: the spans are addresses, not Go memory of ours.
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, s.lo, s.hi-s.lo, syscall.MADV_HUGEPAGE); e != 0 {
			return fmt.Errorf("madvise(MADV_HUGEPAGE): %w", e)
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, s.lo, s.hi-s.lo, madvCollapse); e != 0 && os.Getenv("THPDEBUG") != "" {
			fmt.Fprintf(os.Stderr, "collapse %x-%x: %v\n", s.lo, s.hi, e)
		}
	}
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Rss:") || strings.HasPrefix(l, "AnonHugePages:") {
			fmt.Fprintln(os.Stderr, "peerdecomp: -thp:", strings.Join(strings.Fields(l), " "))
		}
	}
	return nil
}
