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
	// measured against: a key keeps the time of every unit it admitted, and
	// n units fit at t iff the units at times s with t−W < s ≤ t, plus n,
	// are at most the limit. No window of length Window ever holds more
	// than Limit, and nothing is refused early. The price is memory and a
	// lock. Each key holds a ring of one 8-byte timestamp per unit of its
	// limit, allocated in full when the key is created (8·Limit + 48
	// bytes, then the key, rounded up to 64), so Limit is capped by
	// Config.MaxLogLimit. And each key has a
	// spin lock, held for a decision on it, because an exact log must drop
	// expired units, count and append as one step, which no single-word CAS
	// covers: requests for one key are serialised, denials included.
	// SubWindows is ignored; time is clamped to the newest time the key has
	// seen, not to a sub-window.
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
