package engine

import "fmt"

// Algorithm selects how a key's window is estimated.
type Algorithm int

const (
	// SlidingWindow is the weighted sliding window counter, the zero value:
	// the current and N−1 previous sub-windows in full, plus the oldest
	// one weighted by the share of it still inside the window. Worst case
	// (a burst at the end of a sub-window) a true window can hold
	// Limit + that sub-window's count, always below 2·Limit; for smooth
	// traffic it stays near (1+1/N)·Limit.
	SlidingWindow Algorithm = iota
	// SlidingWindowStrict counts every sub-window that overlaps the window
	// in full: no window of length Window ever holds more than Limit
	// admitted units. It may refuse up to one sub-window's worth early.
	SlidingWindowStrict
	// FixedWindow keeps one counter per Unix-aligned Window, for
	// comparison: two adjacent windows can together admit 2·Limit within
	// one Window's length.
	FixedWindow
	// SlidingLog is the exact sliding log, the reference the others are
	// measured against: n units fit at t iff the units admitted at times
	// in (t−W, t], plus n, are at most the limit. No window ever holds more
	// than Limit, and nothing is refused early. The price: each key holds
	// one 8-byte timestamp per unit of its limit (8·Limit + 48 bytes, then
	// the key, rounded up to 64; Limit is capped by Config.MaxLogLimit),
	// and a spin lock that serialises the key's decisions. SubWindows is
	// ignored.
	SlidingLog
	// TokenBucket is a token bucket as golang.org/x/time/rate users know
	// it, decided by GCRA: Limit units per Window refill continuously (one
	// unit every Window/Limit, exactly, as a rational), and a key holds at
	// most Config.Burst units (0 means Limit); a fresh key starts full. In
	// any interval of length D at most Burst + ⌊D·Limit/Window⌋ units are
	// admitted. A key's whole state is one 64-bit word (its theoretical
	// arrival time), changed with one CAS. SubWindows is ignored.
	TokenBucket
)

// String returns the algorithm's name as the flags of the tools spell it.
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding"
	case SlidingWindowStrict:
		return "strict"
	case FixedWindow:
		return "fixed"
	case SlidingLog:
		return "log"
	case TokenBucket:
		return "token"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm is the inverse of Algorithm.String.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := SlidingWindow; a <= TokenBucket; a++ {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("ringlimit: unknown algorithm %q (want sliding, strict, fixed, log or token)", s)
}
