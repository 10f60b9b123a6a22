package engine_test

// The stress checker: many goroutines on a few hot keys, a ManualClock that
// the workers themselves advance, jittered and backward times, idle phases,
// far jumps that retire rings, a background sweeper and a Sweep loop, and
// SetLimit/UpdateLimits, all racing. Every admission is recorded with the
// bounds of its effective time, and at quiescent points the records are
// checked against the algorithm's bound, and every key's Remaining against
// an exact recount. It is opt-in by length: `go test -short` skips it, CI
// runs it for 1 s per algorithm, `make stress` for 2 minutes each.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

var stressFor = flag.Duration("stress", time.Second, "how long TestStress runs per algorithm (make stress: 2m)")

const (
	stressLimit    = 10 // the largest limit any key has; limits alternate 10 and 8
	stressKeys     = 3
	stressWorkers  = 8
	stressOps      = 250 // per worker per round
	stressColdKeys = 4096
)

// stressTimeCap is where far jumps stop: each moves a key 2^21 sub-windows
// (58 hours for Fixed's 100 ms window), and a long run would otherwise
// carry the timeline past 2262, where every wait is rightly Never.
var stressTimeCap = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// stressRec is one admission: n units whose effective epoch (SlidingLog:
// time, ns) lies in [lo, hi]; exact when the engine reported it (AllowAtTrace)
// and it was inside the bounds the checker computed on its own.
type stressRec struct {
	key    int
	lo, hi int64
	n      int64
	exact  bool
	id     int64 // a Reservation's, to find it when cancelled; 0 otherwise
}

// stressPending is a Reservation a worker may cancel later, in this round
// or a later one (after idle jumps, sweeps and far jumps).
type stressPending struct {
	r  engine.Reservation
	id int64
}

type stressRun struct {
	t       *testing.T
	e       *engine.Engine
	clk     *engine.ManualClock
	alg     engine.Algorithm
	width   int64 // ns per epoch
	span    int64 // N (0 for Fixed and Log)
	window  int64 // ns
	keyMax  [stressKeys]atomic.Int64
	fails   atomic.Int64
	errMu   sync.Mutex
	errs    []string
	recs    [stressKeys][]stressRec        // kept across rounds, pruned
	pending [stressWorkers][]stressPending // worker w's reservations; only w touches them in a round
	nextID  atomic.Int64
	stats   struct {
		decisions, admitted, exactChecks, boundedChecks, farJumps, idleJumps, rounds int64
		reserved, cancelled, cancelRefused, allowAll                                 int64
	}
	decided atomic.Int64
}

func (s *stressRun) fail(format string, args ...any) {
	if s.fails.Add(1) > 20 {
		return
	}
	s.errMu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	s.errMu.Unlock()
}

func (s *stressRun) epochOf(ns int64) int64 {
	if s.alg == engine.SlidingLog {
		return ns
	}
	return ns / s.width
}

func atomicMax(a *atomic.Int64, v int64) {
	for {
		c := a.Load()
		if v <= c || a.CompareAndSwap(c, v) {
			return
		}
	}
}

// hiBound is the latest effective time a call on key that returns now can
// have used: no requested time beyond the key's newest or the clock.
func (s *stressRun) hiBound(key int) int64 {
	return s.epochOf(max(s.keyMax[key].Load(), s.clk.UnixNano()))
}

func TestStress(t *testing.T) {
	if testing.Short() {
		t.Skip("the stress checker is skipped with -short")
	}
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) { runStress(t, alg, *stressFor) })
	}
}

func runStress(t *testing.T, alg engine.Algorithm, d time.Duration) {
	clk := engine.NewManualClock(time.Date(2023, 5, 1, 0, 0, 0, 0, time.UTC))
	e := newEngine(t, engine.Config{
		Limit: stressLimit, Window: 100 * time.Millisecond, SubWindows: 4, Algorithm: alg,
		Clock: clk, PerKeyLimits: true, SweepInterval: time.Millisecond, Shards: 4,
	})
	s := &stressRun{t: t, e: e, clk: clk, alg: alg, width: e.Width(), span: int64(e.Span()), window: int64(100 * time.Millisecond)}
	start := time.Now()
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 7))
	for round := 0; time.Since(start) < d || round < 4; round++ {
		s.round(rng.Uint64(), round%2 == 1)
		s.quiescentCheck()
		if s.fails.Load() > 0 {
			break
		}
		// Idle phases: jump past the window so that keys are reclaimed
		// while the next round's writers race the sweeps.
		if rng.IntN(3) == 0 {
			clk.Advance(4 * time.Duration(max(s.window, s.width)))
			s.stats.idleJumps++
		}
		// A key that jumped far ahead pulls the clock after it.
		for k := range s.keyMax {
			if m := s.keyMax[k].Load(); m > clk.UnixNano() {
				clk.Set(time.Unix(0, m))
			}
		}
		s.stats.rounds++
	}
	for _, msg := range s.errs {
		t.Error(msg)
	}
	t.Logf("%s: %d rounds, %d goroutines, %d decisions (%d admitted) in %v; %d far jumps, %d idle jumps; Remaining checked exactly %d times, within bounds %d times; %d reservations admitted, %d cancelled, %d cancels refused, %d AllowAll",
		alg, s.stats.rounds, stressWorkers+2, s.decided.Load(), s.stats.admitted, time.Since(start).Round(time.Millisecond),
		s.stats.farJumps, s.stats.idleJumps, s.stats.exactChecks, s.stats.boundedChecks,
		s.stats.reserved, s.stats.cancelled, s.stats.cancelRefused, s.stats.allowAll)
	if s.stats.cancelled == 0 || s.stats.cancelRefused == 0 {
		t.Error("no Cancel returned units, or none was refused: the cancel paths were not exercised")
	}
	if s.stats.exactChecks == 0 {
		t.Error("no quiescent point had exact records only: the Remaining check never bit")
	}
}

// round runs the workers, a SetLimit/UpdateLimits loop and a Sweep loop
// until the workers are done (the engine's own sweeper runs throughout).
func (s *stressRun) round(seed uint64, revive bool) {
	var wg sync.WaitGroup
	var done atomic.Bool
	recs := make([][]stressRec, stressWorkers)
	gone := make([][]int64, stressWorkers) // ids of the reservations each worker cancelled
	var refused, allowAll atomic.Int64
	var far atomic.Int64
	for w := range stressWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs[w], gone[w] = s.worker(w, rand.New(rand.NewPCG(seed, uint64(w))), &far, &refused, &allowAll, revive && w == 0, revive)
		}()
	}
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { // SetLimit and UpdateLimits race the decisions
		defer bg.Done()
		for i := 0; !done.Load(); i++ {
			l := int64(stressLimit - 2*(i%2))
			if i%3 == 0 {
				if err := s.e.UpdateLimits(func(string, int64) int64 { return l }); err != nil {
					s.fail("UpdateLimits(%d): %v", l, err)
				}
			} else if err := s.e.SetLimit(fmt.Sprint("k", i%stressKeys), l); err != nil {
				s.fail("SetLimit(%d): %v", l, err)
			}
		}
	}()
	go func() { // a tight Sweep loop beside the background sweeper
		defer bg.Done()
		for !done.Load() {
			s.e.Sweep()
		}
	}()
	wg.Wait()
	done.Store(true)
	bg.Wait()
	s.stats.farJumps += far.Load()
	s.stats.cancelRefused += refused.Load()
	s.stats.allowAll += allowAll.Load()
	cancelled := map[int64]bool{}
	for _, ids := range gone {
		for _, id := range ids {
			cancelled[id] = true
		}
	}
	s.stats.cancelled += int64(len(cancelled))
	for _, rs := range recs {
		for _, r := range rs {
			s.recs[r.key] = append(s.recs[r.key], r)
			s.stats.admitted += r.n
			if r.id != 0 {
				s.stats.reserved++
			}
		}
	}
	// A Cancel that returned true took the units out: the windows are
	// checked on what is left (the reservation may be from an earlier
	// round).
	for k := range s.recs {
		s.recs[k] = slices.DeleteFunc(s.recs[k], func(r stressRec) bool { return r.id != 0 && cancelled[r.id] })
	}
}

// worker runs stressOps random decisions. In a revive round every worker
// hammers key 0 at the present and the jumper keeps jumping it far ahead,
// which retires its ring: the race of a revival with present writers.
func (s *stressRun) worker(w int, rng *rand.Rand, far, refused, allowAll *atomic.Int64, jumper, revive bool) ([]stressRec, []int64) {
	var out []stressRec
	var gone []int64
	e, clk := s.e, s.clk
	for range stressOps {
		k := rng.IntN(stressKeys)
		op := rng.IntN(200)
		if revive {
			k = 0
			op = rng.IntN(70) // traced AllowAt at the present, or behind
			if jumper && rng.IntN(8) == 0 {
				op = 199
			}
		}
		if op == 199 && s.keyMax[k].Load() > stressTimeCap {
			op = 0 // far jumps stop before the end of representable time (2262)
		}
		key := fmt.Sprint("k", k)
		n := 1 + rng.Int64N(3)
		s.decided.Add(1)
		switch {
		case op < 90 || op == 199: // AllowAt, traced: forward jitter, backward (the clock, behind the key), or far ahead
			at := clk.UnixNano()
			switch {
			case op == 199:
				// Past the revive gap (the ring is retired and
				// replaced), or past settle's lag only (the ring stays
				// and its stale slots are cleared under pending
				// reservations).
				gap := int64(1 << 21)
				if rng.IntN(2) == 0 {
					gap = 1 << 20
				}
				at = s.keyMax[k].Load() + (gap+rng.Int64N(100))*s.width
				n = 1
				far.Add(1)
			case op < 70:
				at += rng.Int64N(s.width / 2)
			}
			atomicMax(&s.keyMax[k], at)
			d, eff := e.AllowAtTrace(key, n, time.Unix(0, at))
			if lo, hi := s.epochOf(at), s.hiBound(k); eff < lo || eff > hi {
				s.fail("%s AllowAt(%d) at %d: effective epoch %d outside [%d, %d]", key, n, at, eff, lo, hi)
			}
			s.checkDecision(key, n, d)
			if d.Allowed {
				out = append(out, stressRec{key: k, lo: eff, hi: eff, n: n, exact: true})
			}
		case op < 140: // Allow and AllowN on the engine's clock: bounded, not traced
			lo := s.epochOf(clk.UnixNano())
			var ok bool
			if op < 115 {
				n = 1
				ok = e.Allow(key)
			} else {
				d := e.AllowN(key, n)
				s.checkDecision(key, n, d)
				ok = d.Allowed
			}
			if ok {
				out = append(out, stressRec{key: k, lo: lo, hi: s.hiBound(k), n: n})
			}
		case op < 150: // cold keys: thousands of them, reclaimed by racing sweeps after each idle jump
			e.Allow(fmt.Sprint("cold", rng.IntN(stressColdKeys)))
		case op < 163: // ReserveAt, traced through the Reservation, kept to cancel later
			at := clk.UnixNano() + rng.Int64N(s.width/2)
			atomicMax(&s.keyMax[k], at)
			if len(s.pending[w]) == 64 {
				s.pending[w] = s.pending[w][1:]
			}
			s.pending[w] = append(s.pending[w], stressPending{r: e.ReserveAt(key, n, time.Unix(0, at)), id: s.nextID.Add(1)})
			p := &s.pending[w][len(s.pending[w])-1]
			d := p.r.Decision()
			if !d.Allowed && rng.IntN(8) > 0 {
				s.pending[w] = s.pending[w][:len(s.pending[w])-1] // keep a few denied ones to cancel
			}
			s.checkDecision(key, n, d)
			if d.Allowed {
				eff := p.r.Epoch()
				if lo, hi := s.epochOf(at), s.hiBound(k); eff < lo || eff > hi {
					s.fail("%s ReserveAt(%d) at %d: effective epoch %d outside [%d, %d]", key, n, at, eff, lo, hi)
				}
				out = append(out, stressRec{key: k, lo: eff, hi: eff, n: n, exact: true, id: p.id})
			}
		case op < 168: // Cancel one of this worker's reservations, sometimes twice
			if len(s.pending[w]) == 0 {
				break
			}
			i := rng.IntN(len(s.pending[w]))
			if rng.IntN(3) > 0 { // mostly a recent one, whose sub-window is still inside
				i = max(0, len(s.pending[w])-1-rng.IntN(3))
			}
			p := &s.pending[w][i]
			if p.r.Cancel() {
				gone = append(gone, p.id)
				if p.r.Cancel() {
					s.fail("%s: a second Cancel of reservation %d returned its units again", p.r.Key(), p.id)
				}
			} else {
				refused.Add(1)
			}
			if rng.IntN(2) == 0 {
				s.pending[w] = slices.Delete(s.pending[w], i, i+1)
			}
		case op < 170: // AllowAll over two keys: both or neither
			k2 := (k + 1) % stressKeys
			key2 := fmt.Sprint("k", k2)
			at := clk.UnixNano()
			lo := s.epochOf(at)
			atomicMax(&s.keyMax[k], at)
			atomicMax(&s.keyMax[k2], at)
			i, d := engine.AllowAll(time.Unix(0, at), engine.Request{Engine: e, Key: key, N: n}, engine.Request{Engine: e, Key: key2, N: 1})
			allowAll.Add(1)
			if d.Allowed != (i < 0) {
				s.fail("AllowAll: index %d with %+v", i, d)
			}
			if i < 0 {
				out = append(out, stressRec{key: k, lo: lo, hi: s.hiBound(k), n: n}, stressRec{key: k2, lo: lo, hi: s.hiBound(k2), n: 1})
			}
		case op < 175: // requests that record nothing
			bad := []int64{0, -1, -5, stressLimit + 1, 1 << 41}[rng.IntN(5)]
			d := e.AllowAt(key, bad, time.Unix(0, clk.UnixNano()))
			if bad == 0 && (!d.Allowed || d.RetryAfter != 0) || bad != 0 && (d.Allowed || d.RetryAfter != engine.Never) {
				s.fail("%s AllowAt(n=%d): %+v", key, bad, d)
			}
		default: // the workers move the clock
			clk.Advance(time.Duration(rng.Int64N(s.width / 4)))
		}
	}
	return out, gone
}

// checkDecision checks what a single Decision must say on its own.
func (s *stressRun) checkDecision(key string, n int64, d engine.Decision) {
	switch {
	case d.Limit != stressLimit && d.Limit != stressLimit-2:
		s.fail("%s: Limit %d, want %d or %d", key, d.Limit, stressLimit, stressLimit-2)
	case d.Allowed && d.RetryAfter != 0, d.Remaining < 0 || d.Remaining > d.Limit:
		s.fail("%s n=%d: inconsistent %+v", key, n, d)
	case !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter == engine.Never):
		s.fail("%s n=%d: a denial of a request that fits the limit must say when: %+v", key, n, d)
	}
}

// quiescentCheck runs with no decision in flight: every window holds at
// most the largest limit, and Remaining matches a recount of the records.
func (s *stressRun) quiescentCheck() {
	for k := range stressKeys {
		rs := s.recs[k]
		s.checkWindows(k, rs)
		s.checkRemaining(k, rs)
		// Keep what a later window can still reach.
		horizon := s.epochOf(s.clk.UnixNano()) - s.epochOf(2*s.window+2*s.width) - 2
		if s.alg == engine.SlidingLog {
			horizon = s.clk.UnixNano() - 2*s.window
		}
		s.recs[k] = slices.DeleteFunc(rs, func(r stressRec) bool { return r.hi < horizon })
	}
}

// checkWindows: Strict and Fixed, every window of N+1 epochs (Fixed: one)
// holds ≤ L; Sliding, every N consecutive epochs; the log, every (x−W, x].
// Only records whose effective time is certain are counted.
func (s *stressRun) checkWindows(k int, rs []stressRec) {
	var pts []stressRec
	for _, r := range rs {
		if r.lo == r.hi {
			pts = append(pts, r)
		}
	}
	slices.SortFunc(pts, func(a, b stressRec) int { return int(min(max(a.lo-b.lo, -1), 1)) })
	span := s.span + 1 // epochs per checked window
	switch s.alg {
	case engine.SlidingWindow:
		span = s.span
	case engine.SlidingLog:
		span = s.window // ns: (x−W, x]
	}
	var sum int64
	j := 0
	for i, p := range pts {
		sum += p.n
		for pts[j].lo <= p.lo-span {
			sum -= pts[j].n
			j++
		}
		if i+1 < len(pts) && pts[i+1].lo == p.lo {
			continue // count the whole epoch first
		}
		if sum > stressLimit {
			s.fail("k%d: %d units in the window ending at %d (span %d), limit %d", k, sum, p.lo, span, stressLimit)
			return
		}
	}
}

// checkRemaining peeks at the clock and recounts the key's window from the
// records: exactly when every record that may be inside is exact, within
// the bounds the uncertain ones allow otherwise.
func (s *stressRun) checkRemaining(k int, rs []stressRec) {
	key := fmt.Sprint("k", k)
	now := s.clk.UnixNano()
	d, eff := s.e.AllowAtTrace(key, 0, time.Unix(0, now))
	if lo, hi := s.epochOf(now), s.hiBound(k); eff < lo || eff > hi {
		s.fail("%s peek at %d: effective %d outside [%d, %d]", key, now, eff, lo, hi)
		return
	}
	var full, old, unsure int64
	inside := func(lo, hi int64) (bool, bool) { // (surely inside, maybe inside) the counted range
		first := eff - s.span
		if s.alg == engine.SlidingLog {
			first = eff - s.window + 1
		}
		return lo >= first && hi <= eff, hi >= first && lo <= eff
	}
	for _, r := range rs {
		sure, maybe := inside(r.lo, r.hi)
		switch {
		case sure && r.lo == r.hi && s.alg == engine.SlidingWindow && r.lo == eff-s.span:
			old += r.n
		case sure && r.lo == r.hi:
			full += r.n
		case maybe:
			unsure += r.n
		}
	}
	used := full
	if old > 0 {
		off := int64(0)
		if now/s.width == eff {
			off = now - eff*s.width
		}
		used += (old*(s.width-off) + s.width - 1) / s.width // ceil(old·(w−r)/w)
	}
	hiRem, loRem := max(0, d.Limit-used), max(0, d.Limit-used-unsure)
	if d.Remaining < loRem || d.Remaining > hiRem {
		s.fail("%s at %d (effective %d): Remaining %d, recount says %d … %d (full %d, weighted %d, uncertain %d, limit %d)",
			key, now, eff, d.Remaining, loRem, hiRem, full, old, unsure, d.Limit)
	}
	if unsure == 0 {
		s.stats.exactChecks++
	} else {
		s.stats.boundedChecks++
	}
}
