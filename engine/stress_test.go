package engine_test

// The stress checker: many goroutines on a few hot keys, a ManualClock that
// the workers themselves advance, jittered and backward times, idle phases,
// far jumps that retire rings, a background sweeper and a Sweep loop, and
// SetLimit/UpdateLimits lowering and raising limits, all racing. Every
// admission is recorded with the bounds of its effective time and of the
// limit changes it may have seen, and at quiescent points the records are
// checked against the algorithm's bound under the limit in force (see
// checkWindows), and every key's Remaining against an exact recount. It is
// opt-in by length: `go test -short` skips it, CI runs it for 1 s per
// algorithm, `make stress` for 2 minutes each.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

var stressFor = flag.Duration("stress", time.Second, "how long TestStress runs per algorithm (make stress: 2m)")

const (
	stressLimit    = 10 // Config.Limit, and the largest limit any key has
	stressLowest   = 6  // limits change between stressLowest and stressLimit
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
	// The limit changes of the key the decision may have been made
	// under: from the newest SetLimit complete when it started (sure) to
	// the newest change begun when it returned (begun), see stressLimits.
	sure, begun int64
}

// stressLimits is the history of one key's limit changes, for judging a
// window by the limit in force. Change j (from 1) sets vals[j]; vals[0] is
// Config.Limit. The changer makes them one at a time: it appends the value,
// stores begun = j and cur = the value (what Config.KeyLimit gives a ring
// created from then on), makes the change, and for a SetLimit stores sure
// = j. So at any instant the key's limit is vals[j] for some j in
// [sure, begun]: a SetLimit applies itself to whichever ring is the key's
// when it returns (it follows a replacement), and a ring created later gets
// cur. An UpdateLimits is not sure: a ring created while it runs may keep
// the KeyLimit it was created with (as UpdateLimits documents), so it
// raises begun only.
type stressLimits struct {
	vals        []int64 // vals[i] is change base+i; written by the changer only, read and pruned at quiescent points
	base        int64
	begun, sure atomic.Int64
	cur         atomic.Int64
}

// start and end return the marks to record around a decision: sure before
// it, begun after it.
func (l *stressLimits) start() int64 { return l.sure.Load() }
func (l *stressLimits) end() int64   { return l.begun.Load() }

// most returns the largest limit among changes lo … hi.
func (l *stressLimits) most(lo, hi int64) int64 {
	m := int64(0)
	for _, v := range l.vals[lo-l.base : hi-l.base+1] {
		m = max(m, v)
	}
	return m
}

// at returns up to 8 limits from change j on, for a failure's message.
func (l *stressLimits) at(j int64) []int64 {
	return l.vals[j-l.base : min(int64(len(l.vals)), j-l.base+8)]
}

// prune forgets the changes before from, which no record can reach.
func (l *stressLimits) prune(from int64) {
	if from > l.base {
		l.vals = append(l.vals[:0], l.vals[from-l.base:]...)
		l.base = from
	}
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
	limits  [stressKeys]stressLimits
	fails   atomic.Int64
	errMu   sync.Mutex
	errs    []string
	recs    [stressKeys][]stressRec        // kept across rounds, pruned
	pending [stressWorkers][]stressPending // worker w's reservations; only w touches them in a round
	nextID  atomic.Int64
	stats   struct {
		decisions, admitted, exactChecks, boundedChecks, farJumps, idleJumps, rounds int64
		reserved, cancelled, cancelRefused, allowAll                                 int64
		limitChanges, lowered, belowWindows                                          int64
	}
	decided atomic.Int64
	model   *model // recounts Remaining at the quiescent checks
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
	// More OS threads than cores, so that the OS preempts decisions at any
	// instruction, not only where Go's scheduler would: a decision stalled
	// between reading its key's limit and deciding is what a limit change
	// must not break (docs/design.md §3c). The verdicts do not depend on
	// it; how often the races happen does.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) { runStress(t, alg, *stressFor) })
	}
}

func runStress(t *testing.T, alg engine.Algorithm, d time.Duration) {
	clk := engine.NewManualClock(time.Date(2023, 5, 1, 0, 0, 0, 0, time.UTC))
	s := &stressRun{t: t, clk: clk, alg: alg, window: int64(100 * time.Millisecond)}
	for k := range s.limits {
		s.limits[k].vals = []int64{stressLimit}
		s.limits[k].cur.Store(stressLimit)
	}
	e := newEngine(t, engine.Config{
		Limit: stressLimit, Window: 100 * time.Millisecond, SubWindows: 4, Algorithm: alg,
		Clock: clk, SweepInterval: time.Millisecond, Shards: 4,
		KeyLimit: func(key string) int64 { // a new ring gets the newest limit begun (0 for the cold keys: Limit)
			if len(key) == 2 && key[0] == 'k' {
				return s.limits[key[1]-'0'].cur.Load()
			}
			return 0
		},
	})
	s.e, s.width, s.span = e, e.Width(), int64(e.Span())
	s.model = newModel(engine.Config{Limit: stressLimit, Window: 100 * time.Millisecond, SubWindows: 4, Algorithm: alg})
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
	t.Logf("%s: %d rounds, %d goroutines, %d decisions (%d admitted) in %v; %d far jumps, %d idle jumps; Remaining checked exactly %d times, within bounds %d times; %d reservations admitted, %d cancelled, %d cancels refused, %d AllowAll; %d limit changes (%d lowering), %d windows judged under a limit below %d",
		alg, s.stats.rounds, stressWorkers+2, s.decided.Load(), s.stats.admitted, time.Since(start).Round(time.Millisecond),
		s.stats.farJumps, s.stats.idleJumps, s.stats.exactChecks, s.stats.boundedChecks,
		s.stats.reserved, s.stats.cancelled, s.stats.cancelRefused, s.stats.allowAll, s.stats.limitChanges, s.stats.lowered, s.stats.belowWindows, stressLimit)
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
	go func() { // SetLimit and UpdateLimits lower and raise limits under the decisions
		defer bg.Done()
		crng := rand.New(rand.NewPCG(seed, 1<<32))
		for i := 0; !done.Load(); i++ {
			// A pause between changes, so that most decisions see none
			// and the checker knows their limit exactly.
			for range 1 + crng.IntN(8) {
				runtime.Gosched()
			}
			l := stressLowest + crng.Int64N(stressLimit-stressLowest+1)
			if i%4 == 3 {
				for k := range s.limits {
					s.beginChange(k, l)
				}
				if err := s.e.UpdateLimits(func(string, int64) int64 { return l }); err != nil {
					s.fail("UpdateLimits(%d): %v", l, err)
				}
				continue
			}
			k := crng.IntN(stressKeys)
			if crng.IntN(2) == 0 {
				// Lower to just above what the key holds: the requests
				// that fit the new limit race those that read the old
				// one (the race of docs/design.md §3c).
				if d := s.e.AllowN(fmt.Sprint("k", k), 0); d.Remaining > 1 {
					l = max(stressLowest, d.Limit-d.Remaining+1)
				}
			}
			j := s.beginChange(k, l)
			if err := s.e.SetLimit(fmt.Sprint("k", k), l); err != nil {
				s.fail("SetLimit(%d): %v", l, err)
			}
			s.limits[k].sure.Store(j)
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
