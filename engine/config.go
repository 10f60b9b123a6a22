package engine

import (
	"fmt"
	"runtime"
	"time"

	"github.com/ringlimit/ringlimit/internal/pack"
	"github.com/ringlimit/ringlimit/ringslot"
)

// MaxLimit is pack.MaxCount, written out so that go doc shows its value:
// a compile error here if the slot's count width changes.
var (
	_ [MaxLimit - pack.MaxCount]struct{}
	_ [pack.MaxCount - MaxLimit]struct{}
)

// Bounds of Config fields.
const (
	// MaxLimit is the largest limit, 2^40 − 1 = 1,099,511,627,775: a
	// sub-window's count is 40 bits.
	MaxLimit = 1<<40 - 1
	// DefaultSubWindows is N when Config.SubWindows is 0.
	DefaultSubWindows = 10
	// MaxSubWindows bounds N: a decision reads N+1 slots.
	MaxSubWindows = 1000
	// MaxShards bounds Config.Shards.
	MaxShards = 1 << 16
	// MaxWindow bounds Config.Window (2^60 ns, about 36.5 years), so that
	// times, waits and window ends computed from it (up to two windows past
	// a time before 2116) stay inside int64 nanoseconds.
	MaxWindow = time.Duration(1 << 60)
	// DefaultMaxLogLimit is the largest SlidingLog limit when
	// Config.MaxLogLimit is 0: 10,000 units, about 80 KB for one key.
	DefaultMaxLogLimit = 10_000
	// MaxLogLimitCeiling bounds Config.MaxLogLimit: 2^20 units, 8 MiB for
	// one key's log. Beyond that a sliding window counter is the tool.
	MaxLogLimitCeiling = 1 << 20
	// DefaultMaxKeyBytes is Config.MaxKeyBytes when 0: keys of up to
	// 4 KiB are held, longer ones refused (ReasonKeyTooLong).
	DefaultMaxKeyBytes = 4096
	// MaxKeyBytesCeiling bounds Config.MaxKeyBytes (1 MiB): a key is kept
	// in its state, so the cap is the memory one request can make the
	// engine hold.
	MaxKeyBytesCeiling = 1 << 20

	// MaxExpectedKeys bounds Config.ExpectedKeys (16,777,216): its slab
	// is 4 GiB with the default geometry (2^25 slots of 128 B), and
	// configurations with larger states take fewer keys (see ExpectedKeys).
	MaxExpectedKeys = 1 << 24

	// DefaultAuditMaxKeys is Config.AuditMaxKeys when 0, and
	// MaxAuditMaxKeys its largest value.
	DefaultAuditMaxKeys = 10_000
	MaxAuditMaxKeys     = 1 << 24
	// DefaultAuditMaxEntries is Config.AuditMaxEntries when 0 (log
	// entries are 32 bytes, in slices at most 4× their live length: 32 MiB
	// at worst), and MaxAuditMaxEntries its largest value.
	DefaultAuditMaxEntries = 1 << 18
	MaxAuditMaxEntries     = 1 << 30
	// DefaultAuditBuffer is Config.AuditBuffer when 0; MinAuditBuffer …
	// MaxAuditBuffer bound it, a power of two.
	DefaultAuditBuffer = 1 << 14
	MinAuditBuffer     = 1 << 6
	MaxAuditBuffer     = 1 << 24
)

// Config configures an Engine. Limit and Window are required; every other
// field has a usable zero value.
type Config struct {
	// Limit is the number of units admitted per Window, per key:
	// 1 ≤ Limit ≤ MaxLimit, and ≤ MaxLogLimit with SlidingLog. With
	// KeyLimit it is the default limit.
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
	// Burst is the capacity of a TokenBucket key: the most units it
	// admits at once, and what a fresh or idle key holds. 0 means Limit;
	// otherwise 1 … MaxLimit. Other algorithms refuse it (0 only). New
	// refuses a bucket whose Burst·Window/gcd(Limit, Window) is above 2^60
	// (docs/design.md §11: the key's one word counts time in units of
	// gcd(Limit, Window)/Limit ns, so that the rate is exact).
	Burst int64
	// MaxLogLimit caps every limit of a SlidingLog engine (Limit, KeyLimit
	// results and SetLimit), because a log key holds 8 bytes per unit of
	// its limit: 0 means DefaultMaxLogLimit, otherwise 1 …
	// MaxLogLimitCeiling. Other algorithms ignore it.
	MaxLogLimit int64
	// MaxKeyBytes is the longest key, in bytes, that the engine holds: 0
	// means DefaultMaxKeyBytes, otherwise 1 … MaxKeyBytesCeiling. A
	// decision on a longer key is refused with ReasonKeyTooLong and stores
	// nothing; SetLimit and SetLimitAt return an error.
	MaxKeyBytes int

	// KeyLimit, if set, gives a key its own limit when its state is
	// created: on first sight, and again after it was reclaimed. It may be
	// called concurrently, and more than once for one key (one result is
	// kept). 0 means Limit; a result outside 1 … MaxLimit (1 … MaxLogLimit
	// with SlidingLog) refuses that request with RetryAfter Never and
	// creates nothing. It implies PerKeyLimits.
	KeyLimit func(key string) int64
	// PerKeyLimits stores a limit in every key's state, so that SetLimit
	// can change one key's limit: 8 bytes more per key, which with N = 10
	// and keys of 8 to 15 bytes makes a 192-byte state of a 128-byte one.
	PerKeyLimits bool

	// Clock, if set, is the time source of Allow and AllowN and of the
	// sweeper, in Unix nanoseconds. nil means a monotonic clock anchored
	// at the wall time of New (an NTP step cannot move it). Tests inject a
	// ManualClock.
	Clock Clock
	// CoarseClock, if > 0, makes the engine own a cached clock refreshed
	// every CoarseClock (≥ 100µs): one atomic load per decision instead of
	// a clock read (about 30–60 ns). It cannot be combined with Clock. The
	// bounds then hold exactly on the coarse timeline, and in real time
	// over windows shorter by Λ, the longest gap between two refreshes: a
	// unit can leave the window up to Λ early, and a window open up to Λ
	// late (docs/semantics.md, "Time"). Close stops the refresher; the
	// engine then reads the precise clock.
	CoarseClock time.Duration

	// Shards is the number of map shards, a power of two in 1 … MaxShards;
	// 0 means the smallest power of two ≥ 8·GOMAXPROCS (at least 16).
	Shards int
	// MaxKeys, if > 0, caps the number of keys held. When it is reached a
	// request for a new key is refused (ReasonKeysFull); existing keys
	// are never evicted early to make room.
	MaxKeys int64
	// ExpectedKeys, if > 0, sizes the key table for that many keys from
	// the start, as make(map, n) does: New presizes the maps and, for the
	// counter algorithms, starts the home slab (most keys found without
	// the map) with a power of two ≥ 2n slots. The slab's memory is taken
	// by New and kept (256 MiB for 1M keys with the default geometry); the
	// table still grows past n. 0 … MaxExpectedKeys, at most MaxKeys when
	// set, and within a 4 GiB slab (512 MiB on 32-bit) for the
	// configuration's state size: New's error gives that bound
	// (docs/benchmarks.md, "ExpectedKeys").
	ExpectedKeys int64
	// LookupCache is ignored: the key table's home slab, which a table
	// starts by itself once it holds about 131k keys, finds most keys
	// without the map, with no pointer for the collector to scan
	// (docs/design.md, "The home slab").
	//
	// Deprecated: it has no effect since the home slab; leave it unset.
	LookupCache bool

	// DisableEviction stops the engine from reclaiming idle keys. Set it
	// when driving AllowAt with a timeline unrelated to Clock (replays,
	// simulations), or inject a Clock that follows that timeline: idleness
	// is judged by Clock.
	DisableEviction bool
	// SweepInterval is the period of one full sweep over every shard; the
	// sweeper visits one shard per SweepInterval/Shards. 0 means
	// max(Window + one sub-window, 1s), or max(Window, 1s) for FixedWindow
	// and SlidingLog. A key, its counts and its SetLimit override are kept
	// while it is idle for at most Window plus one sub-window (FixedWindow,
	// whose sub-window is the window: 2·Window; SlidingLog: Window). Once
	// idle for Window plus two sub-windows (FixedWindow: 3·Window;
	// SlidingLog: just over Window) it is reclaimed within one more
	// SweepInterval. A TokenBucket key is kept until its bucket is full
	// again (idle for at most Burst·Window/Limit), then reclaimed within
	// one SweepInterval, whose default is max(Burst·Window/Limit, 1s).
	SweepInterval time.Duration

	// Audit is the share of keys whose decisions the engine shadows with an
	// exact sliding log, to measure its own accuracy on live traffic
	// (Engine.Audit): 0 (off, the default) or a fraction in (0, 1]. A key
	// is sampled by its seeded hash, with all its decisions. An unsampled
	// key pays one compare and a predictable branch (docs/audit.md).
	Audit float64
	// AuditMaxKeys caps the keys shadowed at once: 0 means
	// DefaultAuditMaxKeys, otherwise 1 … MaxAuditMaxKeys. A sampled key
	// that finds the cap reached is not shadowed (AuditReport.KeysSkipped).
	// Needs Audit > 0.
	AuditMaxKeys int
	// AuditMaxEntries caps the log entries (one per admitted decision still
	// inside its key's window) of all shadowed keys together: 0 means
	// DefaultAuditMaxEntries, otherwise 1 … MaxAuditMaxEntries. A key whose
	// log would pass it stops being shadowed until its units have left the
	// window (AuditReport.KeysSkipped). Needs Audit > 0.
	AuditMaxEntries int64
	// AuditBuffer is the number of sampled decisions held between two
	// drains into the logs (every AuditDrainInterval, whenever a quarter
	// of it has filled, and at each Engine.Audit): 0 means
	// DefaultAuditBuffer, otherwise a power of two in MinAuditBuffer …
	// MaxAuditBuffer. A decision that finds it full is counted in
	// AuditReport.Dropped, never lost silently. Size it as AuditBuffer ≥
	// 2·R·(the longest scheduling delay you expect) at R sampled decisions
	// per second (docs/audit.md). Needs Audit > 0.
	AuditBuffer int
}

// normalized holds a validated Config with defaults applied.
type normalized struct {
	Config
	n        int   // sub-windows
	width    int64 // sub-window width, ns (Window for FixedWindow and SlidingLog)
	maxLimit int64 // the largest limit of any key: MaxLimit, or the log's cap
	maxKey   int   // MaxKeyBytes with its default applied
	burst    int64 // TokenBucket: Burst with its default applied
	refill   int64 // TokenBucket: ⌈burst·Window/Limit⌉ ns, the time to refill from empty
	shards   int
	sweep    time.Duration
	// audit, with Config.Audit > 0: the sampling threshold and the caps
	// with their defaults applied.
	auditBelow      uint64
	auditMaxKeys    int
	auditMaxEntries int64
	auditBuffer     int
	idle            time.Duration // how soon a key idle from now is reclaimable: the KeysFull hint
}

func (c Config) validate() (normalized, error) {
	nc := normalized{Config: c}
	switch c.Algorithm {
	case SlidingWindow, SlidingWindowStrict, FixedWindow, SlidingLog, TokenBucket:
	default:
		return nc, fmt.Errorf("ringlimit: Config.Algorithm = %d, want SlidingWindow (0), SlidingWindowStrict (1), FixedWindow (2), SlidingLog (3) or TokenBucket (4)", int(c.Algorithm))
	}
	if c.MaxLogLimit < 0 || c.MaxLogLimit > MaxLogLimitCeiling {
		return nc, fmt.Errorf("ringlimit: Config.MaxLogLimit = %d, want 0 (default %d) or 1 … %d", c.MaxLogLimit, DefaultMaxLogLimit, MaxLogLimitCeiling)
	}
	nc.maxLimit = MaxLimit
	if c.Algorithm == SlidingLog {
		nc.maxLimit = c.MaxLogLimit
		if nc.maxLimit == 0 {
			nc.maxLimit = DefaultMaxLogLimit
		}
	}
	if c.MaxKeyBytes < 0 || c.MaxKeyBytes > MaxKeyBytesCeiling {
		return nc, fmt.Errorf("ringlimit: Config.MaxKeyBytes = %d, want 0 (default %d) or 1 … %d", c.MaxKeyBytes, DefaultMaxKeyBytes, MaxKeyBytesCeiling)
	}
	nc.maxKey = c.MaxKeyBytes
	if nc.maxKey == 0 {
		nc.maxKey = DefaultMaxKeyBytes
	}
	if c.Limit < 1 || c.Limit > nc.maxLimit {
		return nc, nc.limitError("Config.Limit", c.Limit)
	}
	if c.Window <= 0 || c.Window > MaxWindow {
		return nc, fmt.Errorf("ringlimit: Config.Window = %v, want > 0 and ≤ %v", c.Window, MaxWindow)
	}
	if err := nc.validateBurst(); err != nil {
		return nc, err
	}
	nc.n = c.SubWindows
	if c.SubWindows == 0 {
		nc.n = DefaultSubWindows
	}
	if c.SubWindows < 0 || c.SubWindows > MaxSubWindows {
		return nc, fmt.Errorf("ringlimit: Config.SubWindows = %d, want 0 (default %d) or 1 … %d", c.SubWindows, DefaultSubWindows, MaxSubWindows)
	}
	if c.Algorithm == FixedWindow || c.Algorithm == SlidingLog || c.Algorithm == TokenBucket {
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
	if hi := int64(MaxExpectedKeys); c.ExpectedKeys < 0 || c.ExpectedKeys > hi || c.MaxKeys > 0 && c.ExpectedKeys > c.MaxKeys {
		if c.MaxKeys > 0 && c.MaxKeys < hi {
			return nc, fmt.Errorf("ringlimit: Config.ExpectedKeys = %d, want 0 (grow as keys come) or 1 … %d (Config.MaxKeys)", c.ExpectedKeys, c.MaxKeys)
		}
		return nc, fmt.Errorf("ringlimit: Config.ExpectedKeys = %d, want 0 (grow as keys come) or 1 … %d", c.ExpectedKeys, hi)
	}
	if c.SweepInterval < 0 {
		return nc, fmt.Errorf("ringlimit: Config.SweepInterval = %v, want 0 (default) or > 0", c.SweepInterval)
	}
	nc.sweep = c.SweepInterval
	if nc.sweep == 0 {
		nc.sweep = c.Window + time.Duration(nc.width)
		if c.Algorithm == FixedWindow || c.Algorithm == SlidingLog {
			nc.sweep = c.Window
		}
		if c.Algorithm == TokenBucket {
			nc.sweep = time.Duration(nc.refill)
		}
		if nc.sweep < 0 { // Window + width overflowed
			nc.sweep = c.Window
		}
		if nc.sweep < time.Second {
			nc.sweep = time.Second
		}
	}
	// A key that gets no request from now on is reclaimable after
	// Window + 2 sub-windows (Fixed: 3 windows; a log: just over Window).
	nc.idle = c.Window + 2*time.Duration(nc.width)
	switch {
	case c.Algorithm == FixedWindow:
		nc.idle = 3 * c.Window
	case c.Algorithm == SlidingLog:
		nc.idle = c.Window
	case c.Algorithm == TokenBucket:
		nc.idle = time.Duration(nc.refill)
	}
	if nc.idle < 0 { // overflowed: Window is near MaxWindow
		nc.idle = MaxWindow
	}
	if c.KeyLimit != nil {
		nc.PerKeyLimits = true
	}
	if err := nc.validateAudit(); err != nil {
		return nc, err
	}
	return nc, nil
}

// validateBurst checks Config.Burst: 0 with every algorithm but
// TokenBucket; with it 0 or 1 … MaxLimit, a bucket whose span in the
// state's units fits (ringslot.BucketUnits), and none of the fields a
// bucket does not run.
func (nc *normalized) validateBurst() error {
	c := nc.Config
	if c.Algorithm != TokenBucket {
		if c.Burst != 0 {
			return fmt.Errorf("ringlimit: Config.Burst = %d is set but Config.Algorithm is %v; Burst is the capacity of a TokenBucket, want 0 with other algorithms", c.Burst, c.Algorithm)
		}
		return nil
	}
	if c.Burst < 0 || c.Burst > MaxLimit {
		return fmt.Errorf("ringlimit: Config.Burst = %d, want 0 (Limit) or 1 … %d", c.Burst, int64(MaxLimit))
	}
	nc.burst = c.Burst
	if nc.burst == 0 {
		nc.burst = c.Limit
	}
	rate, step, tau, ok := ringslot.BucketUnits(c.Limit, int64(c.Window), nc.burst)
	if !ok {
		return fmt.Errorf("ringlimit: Config.Burst = %d with Limit %d per Window %v: the bucket spans Burst·Window/gcd(Limit, Window) = %d·%d units of 1/%d ns, above 2^60, the most a key's one word holds exactly; want a smaller Burst or Window, or a Limit sharing more factors with Window (docs/design.md §11)", nc.burst, c.Limit, c.Window, nc.burst, step, rate)
	}
	nc.refill = (tau + rate - 1) / rate // τ/L' ns, rounded up: ≤ 2^60
	for _, f := range []struct {
		name, why string
		set       bool
	}{
		{"PerKeyLimits", "a key's state counts time in units of 1/Limit ns, fixed by the engine's Limit", c.PerKeyLimits},
		{"KeyLimit", "a key's state counts time in units of 1/Limit ns, fixed by the engine's Limit", c.KeyLimit != nil},
		{"Audit", "the self-audit checks decisions against an exact log of Limit per Window, and a token bucket admits up to Burst + ⌊D·Limit/Window⌋ in any D", c.Audit != 0},
	} {
		if f.set {
			return fmt.Errorf("ringlimit: Config.%s is not supported with TokenBucket: %s; leave it unset", f.name, f.why)
		}
	}
	return nil
}

// limitError describes a limit outside 1 … maxLimit, naming what set it.
func (nc normalized) limitError(what string, l int64) error {
	if nc.Algorithm == SlidingLog && l > nc.maxLimit {
		return fmt.Errorf("ringlimit: %s = %d is too large for SlidingLog, want 1 … %d (raise Config.MaxLogLimit, up to %d; a log key holds 8 bytes per unit of its limit)", what, l, nc.maxLimit, MaxLogLimitCeiling)
	}
	return fmt.Errorf("ringlimit: %s = %d, want 1 … %d", what, l, nc.maxLimit)
}

// validateAudit checks the Audit fields and derives the sampling threshold.
func (nc *normalized) validateAudit() error {
	c := nc.Config
	if !(c.Audit >= 0 && c.Audit <= 1) { // also refuses NaN
		return fmt.Errorf("ringlimit: Config.Audit = %v, want 0 (off) or a share of keys in (0, 1], e.g. 0.001 for one key in 1,000", c.Audit)
	}
	if c.Audit == 0 {
		for _, f := range []struct {
			name string
			set  bool
		}{{"AuditMaxKeys", c.AuditMaxKeys != 0}, {"AuditMaxEntries", c.AuditMaxEntries != 0}, {"AuditBuffer", c.AuditBuffer != 0}} {
			if f.set {
				return fmt.Errorf("ringlimit: Config.%s is set but Config.Audit is 0 (off); want Config.Audit in (0, 1], or leave %s 0", f.name, f.name)
			}
		}
		return nil
	}
	nc.auditBelow = auditThreshold(c.Audit)
	if nc.auditBelow == 0 {
		return fmt.Errorf("ringlimit: Config.Audit = %v is below 2^-63, the smallest share that samples any key; want 0 (off) or a share in [2^-63, 1]", c.Audit)
	}
	nc.auditMaxKeys = c.AuditMaxKeys
	if nc.auditMaxKeys == 0 {
		nc.auditMaxKeys = DefaultAuditMaxKeys
	}
	if c.AuditMaxKeys < 0 || c.AuditMaxKeys > MaxAuditMaxKeys {
		return fmt.Errorf("ringlimit: Config.AuditMaxKeys = %d, want 0 (default %d) or 1 … %d", c.AuditMaxKeys, DefaultAuditMaxKeys, MaxAuditMaxKeys)
	}
	nc.auditMaxEntries = c.AuditMaxEntries
	if nc.auditMaxEntries == 0 {
		nc.auditMaxEntries = DefaultAuditMaxEntries
	}
	if c.AuditMaxEntries < 0 || c.AuditMaxEntries > MaxAuditMaxEntries {
		return fmt.Errorf("ringlimit: Config.AuditMaxEntries = %d, want 0 (default %d) or 1 … %d", c.AuditMaxEntries, DefaultAuditMaxEntries, MaxAuditMaxEntries)
	}
	nc.auditBuffer = c.AuditBuffer
	if nc.auditBuffer == 0 {
		nc.auditBuffer = DefaultAuditBuffer
	}
	if c.AuditBuffer < 0 || c.AuditBuffer > MaxAuditBuffer || (c.AuditBuffer != 0 && (c.AuditBuffer < MinAuditBuffer || c.AuditBuffer&(c.AuditBuffer-1) != 0)) {
		return fmt.Errorf("ringlimit: Config.AuditBuffer = %d, want 0 (default %d) or a power of two in %d … %d", c.AuditBuffer, DefaultAuditBuffer, MinAuditBuffer, MaxAuditBuffer)
	}
	return nil
}
