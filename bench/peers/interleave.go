package peers

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
)

// The interleaved comparison. A single go test -bench pass per peer is not
// a measurement on a noisy shared machine: the same peer has measured 342
// ns in one run and 787 ns in another, because whatever else the machine
// runs moves between the passes. So Interleave builds every limiter of a
// scenario first, then runs them in rotation for a number of rounds, each
// round timing every limiter once, one right after another, starting at a
// different limiter each round. A ratio of two limiters within one round
// compares runs made seconds apart, and the median of the per-round ratios
// over the rounds, with its min and max, is what the report gives.

// InterleaveConfig configures Interleave.
type InterleaveConfig struct {
	Peers     []Peer
	Scenarios []Scenario
	Rounds    int
	// CellTime is the target duration of one limiter's timed run in one
	// round; the request count is fixed per cell before the rounds, from a
	// warm-up, so that every round times the same work.
	CellTime time.Duration
	// Limit per Window for every limiter; the fast path uses one that
	// admits everything.
	Limit  int64
	Window time.Duration
	// CPUTime: time each cell by the CPU time the process used (user and
	// system, all threads: the workers, the garbage collector, a coarse
	// clock's goroutine) rather than by the wall clock. On a machine that
	// other jobs load, the wall clock counts the time the workers waited
	// for a CPU, and moves by 10× between rounds; CPU time does not. It
	// counts CPU per request: for a parallel scenario, the workers' sum,
	// and a limiter whose waiters sleep on a mutex is charged less than
	// one whose waiters spin, so read hot-parallel by the wall clock too.
	CPUTime bool
	// KeyPrefix is the keys' prefix ("": DefaultKeyPrefix, "tenant-"):
	// a longer one measures longer keys (an API key, a UUID).
	KeyPrefix string
	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)
}

// Samples is the outcome of Interleave: per scenario and peer, one ns/op
// per round, the share of requests admitted and the allocations per
// request over all rounds.
type Samples struct {
	Peers     []string             `json:"peers"`
	Kinds     map[string]string    `json:"kinds"`
	Floors    []string             `json:"floors"` // the peers that are floors, not limiters
	Scenarios []string             `json:"scenarios"`
	Rounds    int                  `json:"rounds"`
	CellTime  string               `json:"cell_time"`
	NsOp      map[string][]float64 `json:"ns_op"`    // cellKey → one value per round
	Admitted  map[string]float64   `json:"admitted"` // cellKey → share
	Allocs    map[string]float64   `json:"allocs_op"`
	Ops       map[string]int64     `json:"ops"` // cellKey → requests per round
	Machine   string               `json:"machine,omitempty"`
	Go        string               `json:"go,omitempty"`
	Date      string               `json:"date,omitempty"`
	Command   string               `json:"command,omitempty"`
}

// CellKey names one peer in one scenario.
func CellKey(peer, scenario string) string { return peer + "|" + scenario }

// Interleave runs the comparison; see the top of this file.
func Interleave(cfg InterleaveConfig) (*Samples, error) {
	if cfg.Rounds < 1 || cfg.CellTime <= 0 || len(cfg.Peers) == 0 {
		return nil, fmt.Errorf("peers: Interleave needs Rounds ≥ 1, CellTime > 0 and some peers")
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s := &Samples{
		Kinds: map[string]string{}, Rounds: cfg.Rounds, CellTime: cfg.CellTime.String(),
		NsOp: map[string][]float64{}, Admitted: map[string]float64{}, Allocs: map[string]float64{}, Ops: map[string]int64{},
	}
	for _, p := range cfg.Peers {
		s.Peers = append(s.Peers, p.Name)
		s.Kinds[p.Name] = p.Kind
		for _, f := range Floors {
			if f.Name == p.Name {
				s.Floors = append(s.Floors, p.Name)
			}
		}
	}
	for _, sc := range cfg.Scenarios {
		s.Scenarios = append(s.Scenarios, sc.Name)
		interleaveScenario(cfg, sc, s, logf)
	}
	return s, nil
}

func interleaveScenario(cfg InterleaveConfig, sc Scenario, s *Samples, logf func(string, ...any)) {
	prefix := cfg.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	keys := PrefixedKeySet(prefix, sc.Keys)
	workers := sc.Workers()
	lims := make([]Limiter, len(cfg.Peers))
	start := time.Now()
	for i, p := range cfg.Peers {
		lims[i] = p.New(cfg.Limit, cfg.Window)
		for _, k := range keys {
			lims[i].Allow(k)
		}
	}
	// Finish the collection that building started, so that its marking
	// does not run during the timed rounds (at 1M keys it takes seconds).
	runtime.GC()
	if sc.Distinct {
		keys = KeyCopies(sc.Keys)
	}
	logf("%s: built %d limiters of %d keys in %v", sc.Name, len(lims), len(keys), time.Since(start).Round(time.Millisecond))
	// Warm-up: find each cell's request count for about CellTime.
	ops := make([]int64, len(lims))
	measure := measureWall
	if cfg.CPUTime {
		measure = measureCPU
	}
	for i, l := range lims {
		n := int64(1000)
		for {
			d, _ := measure(l, keys, workers, n)
			if d >= cfg.CellTime/8 || n >= 1<<34 {
				ops[i] = max(1000, int64(float64(n)*float64(cfg.CellTime)/float64(max(d, 1))))
				break
			}
			n *= 4
		}
	}
	admitted := make([]int64, len(lims))
	mallocs := make([]uint64, len(lims))
	var ms runtime.MemStats
	for r := range cfg.Rounds {
		for j := range lims {
			i := (j + r) % len(lims) // each round starts one limiter later
			runtime.ReadMemStats(&ms)
			m0 := ms.Mallocs
			d, a := measure(lims[i], keys, workers, ops[i])
			runtime.ReadMemStats(&ms)
			mallocs[i] += ms.Mallocs - m0
			admitted[i] += a
			k := CellKey(cfg.Peers[i].Name, sc.Name)
			s.NsOp[k] = append(s.NsOp[k], float64(d.Nanoseconds())/float64(ops[i]))
		}
		logf("%s: round %d of %d done", sc.Name, r+1, cfg.Rounds)
	}
	for i, p := range cfg.Peers {
		k := CellKey(p.Name, sc.Name)
		total := float64(ops[i]) * float64(cfg.Rounds)
		s.Ops[k] = ops[i]
		s.Admitted[k] = float64(admitted[i]) / total
		s.Allocs[k] = float64(mallocs[i]) / total
		lims[i].Close()
		lims[i] = nil
	}
	runtime.GC() // give the next scenario a heap without this one's keys
}

// measureCPU is measureWall timed by the process's CPU time (see
// InterleaveConfig.CPUTime).
func measureCPU(lim Limiter, keys []string, workers int, n int64) (time.Duration, int64) {
	c0 := CPUTime()
	_, a := measureWall(lim, keys, workers, n)
	return CPUTime() - c0, a
}

// measureWall sends n requests to lim from workers goroutines (keys drawn
// uniformly, or the one key) and returns the wall time and how many were
// admitted.
func measureWall(lim Limiter, keys []string, workers int, n int64) (time.Duration, int64) {
	if workers == 1 {
		t0 := time.Now()
		a := drive(lim, keys, n, newRNG(seeds.Add(1)))
		return time.Since(t0), a
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted int64
	gate := make(chan struct{})
	per := n / int64(workers)
	for w := range workers {
		m := per
		if w == 0 {
			m += n % int64(workers)
		}
		wg.Add(1)
		go func(r rng) {
			defer wg.Done()
			<-gate
			a := drive(lim, keys, m, r)
			mu.Lock()
			admitted += a
			mu.Unlock()
		}(newRNG(seeds.Add(1)))
	}
	t0 := time.Now()
	close(gate)
	wg.Wait()
	return time.Since(t0), admitted
}

func drive(lim Limiter, keys []string, n int64, r rng) int64 {
	var a int64
	if len(keys) == 1 {
		k := keys[0]
		for range n {
			if lim.Allow(k) {
				a++
			}
		}
		return a
	}
	m := uint32(len(keys))
	for range n {
		if lim.Allow(keys[r.intn(m)]) {
			a++
		}
	}
	return a
}

// Spread is the median of per-round values with their min and max.
type Spread struct{ Median, Min, Max float64 }

// Median is the median of v (the mean of the middle two for an even
// count; NaN for none).
func Median(v []float64) float64 { return spread(v).Median }

func spread(v []float64) Spread {
	if len(v) == 0 {
		return Spread{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{m, s[0], s[len(s)-1]}
}

// Ns is the spread of a cell's per-round ns/op.
func (s *Samples) Ns(peer, scenario string) Spread { return spread(s.NsOp[CellKey(peer, scenario)]) }

// Ratio is the spread of the per-round ratios ns(peer)/ns(ref) in scenario.
func (s *Samples) Ratio(peer, ref, scenario string) Spread {
	a, b := s.NsOp[CellKey(peer, scenario)], s.NsOp[CellKey(ref, scenario)]
	var v []float64
	for r := range min(len(a), len(b)) {
		v = append(v, a[r]/b[r])
	}
	return spread(v)
}

// RatioToBest is the spread of the per-round ratios of peer's ns/op to the
// smallest ns/op among others in the same round, and the peer that was
// fastest in most rounds.
func (s *Samples) RatioToBest(peer string, others []string, scenario string) (Spread, string) {
	a := s.NsOp[CellKey(peer, scenario)]
	var v []float64
	wins := map[string]int{}
	for r := range a {
		best, who := math.Inf(1), ""
		for _, o := range others {
			if x := s.NsOp[CellKey(o, scenario)]; r < len(x) && x[r] < best {
				best, who = x[r], o
			}
		}
		if who != "" {
			v = append(v, a[r]/best)
			wins[who]++
		}
	}
	top := ""
	for _, o := range others { // deterministic: the first in others among equals
		if wins[o] > wins[top] {
			top = o
		}
	}
	return spread(v), top
}

// IsFloor reports whether name is a floor rather than a limiter.
func (s *Samples) IsFloor(name string) bool { return slices.Contains(s.Floors, name) }
