package peers

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/puzpuzpuz/xsync/v3"

	"github.com/ringlimit/ringlimit/engine"
)

// Scenario is one column of the tables.
type Scenario struct {
	Name     string
	Keys     int
	Parallel bool
	// HalfWindow is the window of the half-denied go test table: short
	// enough that a one-second benchmark spans many windows, long enough
	// that a key of the 1M scenario sees several requests per window.
	HalfWindow time.Duration
	// Distinct: requests carry copies of the keys the limiters were filled
	// with, as a server's request keys are, rather than the very strings
	// (which a limiter that keeps the caller's string then compares by
	// pointer, without touching their bytes). Only Interleave runs it.
	Distinct bool
}

// Scenarios are the columns: one hot key (one goroutine, and all of them),
// 1,000 and 1,000,000 keys drawn uniformly by every goroutine.
var Scenarios = []Scenario{
	{"hot-serial", 1, false, 100 * time.Millisecond, false},
	{"hot-parallel", 1, true, 100 * time.Millisecond, false},
	{"1k-parallel", 1_000, true, 100 * time.Millisecond, false},
	{"1M-parallel", 1_000_000, true, time.Second, false},
}

// DistinctScenarios are the interleaved comparison's extra columns.
var DistinctScenarios = []Scenario{
	{"1M-distinct", 1_000_000, true, time.Second, true},
}

// Workers is the number of goroutines the scenario drives a limiter from.
func (sc Scenario) Workers() int {
	if sc.Parallel {
		return runtime.GOMAXPROCS(0) // what RunParallel starts at parallelism 1
	}
	return 1
}

// KeySet returns n distinct keys, "tenant-0" …, each its own allocation,
// built once per n.
func KeySet(n int) []string { return PrefixedKeySet(DefaultKeyPrefix, n) }

// DefaultKeyPrefix is the keys' prefix: "tenant-N" is 8 to 14 bytes.
const DefaultKeyPrefix = "tenant-"

// PrefixedKeySet returns n distinct keys, prefix+"0" …, each its own
// allocation, built once per prefix and n.
func PrefixedKeySet(prefix string, n int) []string {
	keysMu.Lock()
	defer keysMu.Unlock()
	id := keySetID{prefix, n}
	if ks, ok := keySets[id]; ok {
		return ks
	}
	ks := make([]string, n)
	for i := range ks {
		ks[i] = prefix + strconv.Itoa(i)
	}
	keySets[id] = ks
	return ks
}

type keySetID struct {
	prefix string
	n      int
}

var (
	keysMu  sync.Mutex
	keySets = map[keySetID][]string{}
)

// KeyCopies returns copies of KeySet(n), each its own allocation, made
// after the originals.
func KeyCopies(n int) []string {
	ks := KeySet(n)
	cs := make([]string, n)
	for i, k := range ks {
		cs[i] = strings.Clone(k)
	}
	return cs
}

// rng is a xorshift64 generator: a few instructions per key, no shared
// state.
type rng uint64

// seeds hands every goroutine its own seed.
var seeds atomic.Uint64

// newRNG derives a non-zero state from a counter (splitmix64).
func newRNG(seed uint64) rng {
	z := seed*0x9e3779b97f4a7c15 + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	if z == 0 {
		z = 1
	}
	return rng(z)
}

// intn returns a value in [0, n) (Lemire's multiply-shift, no division).
func (r *rng) intn(n uint32) uint32 {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = rng(x)
	return uint32(((x >> 32) * uint64(n)) >> 32)
}

// ---- floors: what a keyed counter costs at the least ----

// Floors are not limiters: they admit everything. They are what any keyed
// limiter must at least do per request, measured beside the peers:
//   - floor-add: xxhash of the key, an xsync.MapOf[string, *slots] Load,
//     one atomic add;
//   - floor-sum11: the same, then the sum of the key's 11 slots (the state
//     of a sliding window of N = 10): the decision of a ringlimit that
//     walked every slot with no tag checks, no time and no CAS. It is
//     bench/'s baseline=hash-map-sum.
var Floors = []Peer{
	{"floor-add", "xxhash + xsync map load + one atomic add (not a limiter)", newFloor(false), false},
	{"floor-sum11", "floor-add + the sum of 11 slots (not a limiter)", newFloor(true), false},
}

type floorSlots = [11]atomic.Int64

type floorLimiter struct {
	m   *xsync.MapOf[string, *floorSlots]
	sum bool
}

func newFloor(sum bool) func(int64, time.Duration) Limiter {
	return func(int64, time.Duration) Limiter {
		return &floorLimiter{m: xsync.NewMapOf[string, *floorSlots](), sum: sum}
	}
}

func (f *floorLimiter) Allow(key string) bool {
	h := xxhash.Sum64String(key)
	p, ok := f.m.Load(key)
	if !ok {
		p, _ = f.m.LoadOrStore(key, new(floorSlots))
	}
	s := p[0].Add(1)
	if f.sum {
		s = 0
		for j := range p {
			s += p[j].Load()
		}
	}
	return s > 0 || h == 1 // always true; uses the hash so it is computed
}

func (f *floorLimiter) Close() {}

// ---- ringlimit's AllowAt with the caller's time and Remaining ----

type ringlimitAt struct {
	e   *engine.Engine
	now time.Time
}

// Allow decides at one fixed instant (the limiter's creation), so the key
// never crosses a sub-window during a run, and reads Remaining, as a
// caller that sets a RateLimit-Remaining header would.
func (l ringlimitAt) Allow(key string) bool {
	d := l.e.AllowAt(key, 1, l.now)
	return d.Allowed && d.Remaining >= 0
}
func (l ringlimitAt) Close() { l.e.Close() }

func ringlimitAtPeer(alg engine.Algorithm) func(int64, time.Duration) Limiter {
	return func(limit int64, window time.Duration) Limiter {
		e, err := engine.New(engine.Config{Limit: limit, Window: window, Algorithm: alg})
		must(err)
		return ringlimitAt{e, time.Now()}
	}
}
