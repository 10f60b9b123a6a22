package engine

import (
	"fmt"
	"runtime"
	"time"

	"github.com/ringlimit/ringlimit/internal/pack"
)

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
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm is the inverse of Algorithm.String.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := SlidingWindow; a <= FixedWindow; a++ {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("ringlimit: unknown algorithm %q (want sliding, strict or fixed)", s)
}

// Bounds of Config fields.
const (
	// MaxLimit is the largest limit: a sub-window's count must fit the
	// slot's count field (pack.CountBits = 40 bits).
	MaxLimit = pack.MaxCount
	// DefaultSubWindows is N when Config.SubWindows is 0.
	DefaultSubWindows = 10
	// MaxSubWindows bounds N: a decision reads N+1 slots.
	MaxSubWindows = 1000
	// MaxShards bounds Config.Shards.
	MaxShards = 1 << 16
)

// Config configures an Engine. Limit and Window are required; every other
// field has a usable zero value.
type Config struct {
	// Limit is the number of units admitted per Window, per key:
	// 1 ≤ Limit ≤ MaxLimit. With KeyLimit it is the default limit.
	Limit int64
	// Window is the length of the sliding window; > 0. With the sliding
	// algorithms it must be a whole number of nanoseconds per sub-window.
	Window time.Duration
	// SubWindows is N, the number of sub-windows per window: 0 means
	// DefaultSubWindows, otherwise 1 … MaxSubWindows. Each key holds N+1
	// slots. FixedWindow ignores it.
	SubWindows int
	// Algorithm is the estimate; the zero value is SlidingWindow.
	Algorithm Algorithm

	// KeyLimit, if set, gives a key its own limit. It is called when a
	// key's state is created: on first sight, and again after the key was
	// idle long enough to be reclaimed. It may be called concurrently, and
	// more than once for one key when two goroutines create it at once
	// (one result is kept). Return 0 for the default Limit. A result
	// outside 1 … MaxLimit refuses that request with RetryAfter Never
	// and creates nothing.
	// Setting KeyLimit enables per-key limits (see PerKeyLimits).
	KeyLimit func(key string) int64
	// PerKeyLimits stores a limit in every key's state, so that SetLimit
	// can change one key's limit. It costs 8 bytes per key. KeyLimit
	// implies it.
	PerKeyLimits bool

	// Clock, if set, is the time source of Allow and AllowN and of the
	// sweeper, in Unix nanoseconds. nil means a monotonic clock anchored
	// at the wall time of New (an NTP step cannot move it). Tests inject a
	// ManualClock.
	Clock Clock
	// CoarseClock, if > 0, makes the engine own a cached clock refreshed
	// every CoarseClock (≥ 100µs), so that Allow costs one atomic load for
	// the time instead of a clock read (about 30–60 ns). Readings lag true
	// time by up to the resolution plus scheduling delay, so a window can
	// open up to that much late; it never opens early. Close stops it. It
	// cannot be combined with Clock.
	CoarseClock time.Duration

	// Shards is the number of map shards, a power of two in 1 … MaxShards;
	// 0 means the smallest power of two ≥ 8·GOMAXPROCS (at least 16).
	Shards int
	// MaxKeys, if > 0, caps the number of keys held. When it is reached a
	// request for a new key is refused (ReasonKeysFull); existing keys
	// are never evicted early to make room.
	MaxKeys int64

	// DisableEviction stops the engine from reclaiming idle keys. Set it
	// when driving AllowAt with a timeline unrelated to Clock (replays,
	// simulations), or inject a Clock that follows that timeline: idleness
	// is judged by Clock.
	DisableEviction bool
	// SweepInterval is the period of one full sweep over every shard; the
	// sweeper visits one shard per SweepInterval/Shards. 0 means
	// max(Window + one sub-window, 1s). A key idle for longer than Window
	// plus one sub-window is reclaimed within one more SweepInterval.
	SweepInterval time.Duration
}

// normalized holds a validated Config with defaults applied.
type normalized struct {
	Config
	n      int   // sub-windows
	width  int64 // sub-window width, ns
	shards int
	sweep  time.Duration
}

func (c Config) validate() (normalized, error) {
	nc := normalized{Config: c}
	if c.Limit < 1 || c.Limit > MaxLimit {
		return nc, fmt.Errorf("ringlimit: Config.Limit = %d, want 1 … %d", c.Limit, int64(MaxLimit))
	}
	if c.Window <= 0 {
		return nc, fmt.Errorf("ringlimit: Config.Window = %v, want > 0", c.Window)
	}
	switch c.Algorithm {
	case SlidingWindow, SlidingWindowStrict, FixedWindow:
	default:
		return nc, fmt.Errorf("ringlimit: Config.Algorithm = %d, want SlidingWindow (0), SlidingWindowStrict (1) or FixedWindow (2)", int(c.Algorithm))
	}
	nc.n = c.SubWindows
	if c.SubWindows == 0 {
		nc.n = DefaultSubWindows
	}
	if c.SubWindows < 0 || c.SubWindows > MaxSubWindows {
		return nc, fmt.Errorf("ringlimit: Config.SubWindows = %d, want 0 (default %d) or 1 … %d", c.SubWindows, DefaultSubWindows, MaxSubWindows)
	}
	if c.Algorithm == FixedWindow {
		nc.n = 0
		nc.width = int64(c.Window)
	} else {
		if int64(c.Window)%int64(nc.n) != 0 {
			return nc, fmt.Errorf("ringlimit: Config.Window = %v is not a whole number of nanoseconds per sub-window (SubWindows = %d); want a Window divisible by %d ns", c.Window, nc.n, nc.n)
		}
		nc.width = int64(c.Window) / int64(nc.n)
	}
	if c.Clock != nil && c.CoarseClock != 0 {
		return nc, fmt.Errorf("ringlimit: Config.Clock and Config.CoarseClock are both set, want at most one")
	}
	if c.CoarseClock != 0 && c.CoarseClock < 100*time.Microsecond {
		return nc, fmt.Errorf("ringlimit: Config.CoarseClock = %v, want 0 (off) or ≥ 100µs", c.CoarseClock)
	}
	nc.shards = c.Shards
	if c.Shards == 0 {
		nc.shards = 16
		for nc.shards < 8*runtime.GOMAXPROCS(0) && nc.shards < MaxShards {
			nc.shards *= 2
		}
	}
	if nc.shards < 1 || nc.shards > MaxShards || nc.shards&(nc.shards-1) != 0 {
		return nc, fmt.Errorf("ringlimit: Config.Shards = %d, want 0 (default) or a power of two in 1 … %d", c.Shards, MaxShards)
	}
	if c.MaxKeys < 0 {
		return nc, fmt.Errorf("ringlimit: Config.MaxKeys = %d, want 0 (unlimited) or > 0", c.MaxKeys)
	}
	if c.SweepInterval < 0 {
		return nc, fmt.Errorf("ringlimit: Config.SweepInterval = %v, want 0 (default) or > 0", c.SweepInterval)
	}
	nc.sweep = c.SweepInterval
	if nc.sweep == 0 {
		nc.sweep = c.Window + time.Duration(nc.width)
		if c.Algorithm == FixedWindow {
			nc.sweep = c.Window
		}
		if nc.sweep < 0 { // Window + width overflowed
			nc.sweep = c.Window
		}
		if nc.sweep < time.Second {
			nc.sweep = time.Second
		}
	}
	if c.KeyLimit != nil {
		nc.PerKeyLimits = true
	}
	return nc, nil
}
