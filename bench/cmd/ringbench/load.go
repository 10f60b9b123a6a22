package main

import (
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// The tiers: limits per window, and the share of tenants in each.
const numTiers = 3

var (
	tierLimits  = [numTiers]int64{100, 1_000, 10_000}
	tierPercent = [numTiers]int{70, 25, 5}
)

const keyPrefix = "tenant-"

// tierTable maps a tenant index to its tier. Its keyLimit is the engine's
// Config.KeyLimit: it parses the index out of the key, with no map and no
// allocation, and captures nothing but the table.
type tierTable []uint8

func (t tierTable) keyLimit(key string) int64 {
	digits, ok := strings.CutPrefix(key, keyPrefix)
	if !ok || digits == "" {
		return 0 // not a tenant: the default limit
	}
	i := 0
	for j := 0; j < len(digits); j++ {
		c := digits[j]
		if c < '0' || c > '9' {
			return 0
		}
		if i = i*10 + int(c-'0'); i >= len(t) {
			return 0
		}
	}
	return tierLimits[t[i]]
}

// plan is what the workers share read-only: built before the memory
// baseline and kept alive until the end, so that it cancels out of bytes
// per key.
type plan struct {
	keys        []string
	perm        []int32   // Zipf rank → tenant, so that hot tenants fall in every tier
	tier        tierTable // tenant → tier
	audit       []int32   // tenant → audit slot, or −1
	audited     []auditee // audit slot → tenant
	tierTenants [numTiers]int
}

// auditee is one audited tenant; slot s is driven only by worker s % workers.
// offline: one of the -sample tenants (the audit section); live: sampled by
// the engine's self-audit (the live-audit section). A tenant can be both.
type auditee struct {
	tenant, rank  int
	offline, live bool
}

func newPlan(o options) *plan {
	n := o.tenants
	p := &plan{
		keys:  make([]string, n),
		perm:  make([]int32, n),
		tier:  make(tierTable, n),
		audit: make([]int32, n),
	}
	// All keys live in one string: "tenant-%06d", wider past a million.
	width := max(6, len(strconv.Itoa(n-1)))
	kl := len(keyPrefix) + width
	buf := make([]byte, 0, n*kl)
	var num [20]byte
	for i := range n {
		buf = append(buf, keyPrefix...)
		d := strconv.AppendInt(num[:0], int64(i), 10)
		for range width - len(d) {
			buf = append(buf, '0')
		}
		buf = append(buf, d...)
	}
	all := string(buf)
	cut0 := (n*tierPercent[0] + 99) / 100
	cut1 := (n*(tierPercent[0]+tierPercent[1]) + 99) / 100
	for i := range n {
		p.keys[i] = all[i*kl : (i+1)*kl]
		p.perm[i] = int32(i)
		p.audit[i] = -1
		switch {
		case i < cut0:
			p.tier[i] = 0
		case i < cut1:
			p.tier[i] = 1
		default:
			p.tier[i] = 2
		}
		p.tierTenants[p.tier[i]]++
	}
	r := rand.New(rand.NewSource(o.seed))
	r.Shuffle(n, func(i, j int) { p.perm[i], p.perm[j] = p.perm[j], p.perm[i] })
	for slot, rank := range auditRanks(n, o.sample, o.zipf) {
		t := int(p.perm[rank])
		p.audit[t] = int32(slot)
		p.audited = append(p.audited, auditee{tenant: t, rank: rank, offline: true})
	}
	return p
}

// addLive adds the tenants e's self-audit samples (Config.Audit) to the
// audited ones, so that their decisions go through AllowAt at known
// instants and the offline auditors see exactly what the engine's audit
// sees.
func (p *plan) addLive(e *engine.Engine) {
	var rank []int32
	for t, key := range p.keys {
		if !e.Audited(key) {
			continue
		}
		if s := p.audit[t]; s >= 0 {
			p.audited[s].live = true
			continue
		}
		if rank == nil {
			rank = make([]int32, len(p.perm))
			for r, tt := range p.perm {
				rank[tt] = int32(r)
			}
		}
		p.audit[t] = int32(len(p.audited))
		p.audited = append(p.audited, auditee{tenant: t, rank: int(rank[t]), live: true})
	}
}

// maxAuditShare bounds the share of the Zipf draws that fall on audited
// tenants. An audited tenant is driven by one worker only and the others
// redraw, so a larger share would waste draws and shift the load.
const maxAuditShare = 0.05

// auditRanks picks s distinct Zipf ranks out of n, spaced geometrically from
// a first rank r0 to the coldest, n−1: saturated tenants, tenants near their
// limit and idle ones. r0 is the hottest rank at which the picked ranks
// together draw at most maxAuditShare of the traffic (or all ranks, when s
// is close to n).
func auditRanks(n, s int, zipfS float64) []int {
	if s == 0 {
		return nil
	}
	total := zipfMass(n, zipfS)
	for r0 := 0; ; r0++ {
		ranks := geometricRanks(r0, n, s)
		var share float64
		for _, r := range ranks {
			share += math.Pow(float64(r+1), -zipfS)
		}
		if share/total <= maxAuditShare || ranks[0] >= n-s {
			return ranks
		}
	}
}

// geometricRanks returns s increasing ranks in [r0, n), spaced by a constant
// ratio from r0 to n−1, pushed apart where rounding would repeat one.
func geometricRanks(r0, n, s int) []int {
	ranks := make([]int, 0, s)
	prev := -1
	for i := range s {
		r := r0
		if s > 1 {
			r = int(math.Round(float64(r0+1)*math.Pow(float64(n)/float64(r0+1), float64(i)/float64(s-1)))) - 1
		}
		r = min(max(r, prev+1), n-(s-i))
		ranks = append(ranks, r)
		prev = r
	}
	return ranks
}

// zipfMass is Σ (k+1)^−s over the n ranks, the normaliser of rand.Zipf with
// v = 1: exact over the first 2^16 ranks, the midpoint integral beyond.
func zipfMass(n int, s float64) float64 {
	const exact = 1 << 16
	var m float64
	for k := 1; k <= min(n, exact); k++ {
		m += math.Pow(float64(k), -s)
	}
	if n > exact {
		a, b := float64(exact)+0.5, float64(n)+0.5
		m += (math.Pow(a, 1-s) - math.Pow(b, 1-s)) / (s - 1)
	}
	return m
}

// auditShare is the share of the draws that fall on the ranks of the
// offline sample; liveShare on those the engine's self-audit samples.
func (p *plan) auditShare(zipfS float64) float64 {
	return p.share(zipfS, func(ae auditee) bool { return ae.offline || !ae.live })
}

func (p *plan) liveShare(zipfS float64) float64 {
	return p.share(zipfS, func(ae auditee) bool { return ae.live })
}

func (p *plan) share(zipfS float64, match func(auditee) bool) float64 {
	var m float64
	for _, ae := range p.audited {
		if match(ae) {
			m += math.Pow(float64(ae.rank+1), -zipfS)
		}
	}
	return m / zipfMass(len(p.keys), zipfS)
}

const (
	cacheLine    = 64
	publishEvery = 1024 // iterations between a worker's progress publications
	sampleEvery  = 64   // latency: 1 call in sampleEvery, per worker (while the buffer lasts)
)

// worker is one load goroutine's state. Only the published counters are
// read while it runs.
type worker struct {
	_         [cacheLine]byte
	decisions atomic.Int64
	allowed   atomic.Int64
	_         [cacheLine - 16]byte

	zipf     *rand.Zipf
	auditors []*auditor // by audit slot; nil for slots other workers own
	counts   [numTiers][2]int64
	redraws  int64    // draws of an audited tenant this worker does not own
	lat      []uint32 // sampled latencies, ns
	stride   uint64   // current sampling stride, a power of two
}

// zipfDrawNs times the load generator alone: one Zipf draw, as the workers
// make one per decision (and per redraw).
func zipfDrawNs(o options) float64 {
	const draws = 100_000
	z := rand.NewZipf(rand.New(rand.NewSource(o.seed)), o.zipf, 1, uint64(o.tenants-1))
	var sum uint64
	start := time.Now()
	for range draws {
		sum += z.Uint64()
	}
	d := time.Since(start)
	drawSink.Store(sum) // keeps the draws observable
	return float64(d.Nanoseconds()) / draws
}

var drawSink atomic.Uint64

// loadResult is what the load run leaves for the report.
type loadResult struct {
	elapsed     time.Duration
	interrupted bool
	workers     []*worker
	auditors    []*auditor
}

// latencyCap sizes each worker's latency buffer for the run, a power of two
// between 2^12 and 2^20; a full buffer keeps every other sample and halves
// the rate, so the sample stays spread over the whole run.
func latencyCap(d time.Duration) int {
	want := d.Seconds() * 16e6 / sampleEvery
	c := 1 << 12
	for c < 1<<20 && float64(c) < want {
		c <<= 1
	}
	return c
}

func (w *worker) sample(d time.Duration) {
	if len(w.lat) == cap(w.lat) {
		kept := w.lat[:0]
		for i := 0; i < len(w.lat); i += 2 {
			kept = append(kept, w.lat[i])
		}
		w.lat = kept
		w.stride *= 2
	}
	w.lat = append(w.lat, uint32(min(d, math.MaxUint32)))
}

// run draws tenants until stop. Audited tenants go through AllowAt with a
// time this worker reads, so that each one's decisions form one sequence
// with known instants; every other tenant goes through Allow and the
// engine's own clock.
func (w *worker) run(e *engine.Engine, p *plan, stop *atomic.Bool, base time.Time) {
	var counts [numTiers][2]int64
	var dec, allowed int64
	var calls uint64
	for it := uint64(0); ; it++ {
		if it%publishEvery == 0 {
			w.decisions.Store(dec)
			w.allowed.Store(allowed)
			if stop.Load() {
				break
			}
		}
		t := p.perm[w.zipf.Uint64()]
		timed := calls&(w.stride-1) == 0
		var ok bool
		if s := p.audit[t]; s >= 0 {
			a := w.auditors[s]
			if a == nil {
				w.redraws++
				continue
			}
			now := base.Add(time.Since(base)) // monotonic, on the wall-clock scale
			if timed {
				t0 := time.Now()
				ok = e.AllowAt(p.keys[t], 1, now).Allowed
				w.sample(time.Since(t0))
			} else {
				ok = e.AllowAt(p.keys[t], 1, now).Allowed
			}
			a.observe(now.UnixNano(), 1, ok)
		} else if timed {
			t0 := time.Now()
			ok = e.Allow(p.keys[t])
			w.sample(time.Since(t0))
		} else {
			ok = e.Allow(p.keys[t])
		}
		calls++
		dec++
		a := 0
		if ok {
			allowed++
			a = 1
		}
		counts[p.tier[t]][a]++
	}
	w.decisions.Store(dec)
	w.allowed.Store(allowed)
	w.counts = counts
}

// runLoad runs the workers for o.duration (or until an interrupt), printing
// a progress line to stderr each second.
func runLoad(o options, p *plan, e *engine.Engine, cpuFile *os.File, stderr io.Writer) (*loadResult, error) {
	res := &loadResult{workers: make([]*worker, o.workers), auditors: make([]*auditor, len(p.audited))}
	imax := uint64(len(p.keys) - 1)
	for i := range res.workers {
		r := rand.New(rand.NewSource(o.seed + int64(i+1)*1_000_003))
		res.workers[i] = &worker{
			zipf:     rand.NewZipf(r, o.zipf, 1, imax),
			auditors: make([]*auditor, len(p.audited)),
			lat:      make([]uint32, 0, latencyCap(o.duration)),
			stride:   sampleEvery,
		}
	}
	for slot, ae := range p.audited {
		a := newAuditor(tierLimits[p.tier[ae.tenant]], int64(o.window))
		res.auditors[slot] = a
		res.workers[slot%o.workers].auditors[slot] = a
	}
	if cpuFile != nil {
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)

	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for _, w := range res.workers {
		wg.Go(func() { w.run(e, p, &stop, start) })
	}
	prog := newProgress(res.workers, e, start)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	done := time.NewTimer(o.duration)
	defer done.Stop()
loop:
	for {
		select {
		case <-done.C:
			break loop
		case <-sig:
			res.interrupted = true
			fmt.Fprintln(stderr, "ringbench: interrupted; stopping and reporting")
			break loop
		case now := <-tick.C:
			prog.line(stderr, now)
		}
	}
	stop.Store(true)
	wg.Wait()
	res.elapsed = time.Since(start)
	if cpuFile != nil {
		pprof.StopCPUProfile()
	}
	return res, nil
}

// progress prints the once-a-second line.
type progress struct {
	workers           []*worker
	e                 *engine.Engine
	start, last       time.Time
	lastDec, lastAllw int64
	heap              heapReader
}

func newProgress(ws []*worker, e *engine.Engine, start time.Time) *progress {
	return &progress{workers: ws, e: e, start: start, last: start, heap: newHeapReader()}
}

func (p *progress) line(w io.Writer, now time.Time) {
	var dec, allowed int64
	for _, wk := range p.workers {
		dec += wk.decisions.Load()
		allowed += wk.allowed.Load()
	}
	dd, da := dec-p.lastDec, allowed-p.lastAllw
	rate := float64(dd) / now.Sub(p.last).Seconds()
	share := 0.0
	if dd > 0 {
		share = 100 * float64(da) / float64(dd)
	}
	fmt.Fprintf(w, "ringbench: %5.1fs  %s decisions/s  allowed %5.1f%%  keys %s  heap %s\n",
		now.Sub(p.start).Seconds(), si(rate), share, commas(p.e.Stats().Keys), mib(p.heap.read()))
	p.last, p.lastDec, p.lastAllw = now, dec, allowed
}
