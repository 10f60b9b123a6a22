package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A process starved of CPU, whose client's own timeouts fire on every
// round trip (ReadTimeout 1 ms: the budget is then its floor, 250 ms), on
// a healthy local redis-server: the confirmation's check waits behind
// every runnable goroutine for each reply (GOMAXPROCS 1, spinners each
// holding the CPU for a time slice), often longer than the budget. Its
// connection must judge the silence by the socket, not by a deadline
// that fired while it waited (checkconn.go). The promise (docs/design.md
// §10): no breaker opens, no policy answers, nothing is admitted past the
// full key, a patient caller (no deadline) is never refused. Before the
// fix, FailOpen admitted up to 1,357,289 calls past the limit and
// FailClosed refused 28,241 of 28,272 patient callers, in some runs; this
// shape (spinners) opened the breaker in most rounds.
func TestStarvedProcessTinyReadTimeoutIsNoOutage(t *testing.T) {
	s := redistest.Start(t)
	hybrids, rounds := []bool{false}, 2
	if longRuns() {
		hybrids, rounds = []bool{false, true}, 6
	}
	for i, hybrid := range hybrids {
		for _, pol := range []FailurePolicy{FailOpen, FailClosed} {
			t.Run(fmt.Sprintf("hybrid=%v/%v", hybrid, pol), func(t *testing.T) {
				c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: time.Millisecond})
				defer c.Close()
				var h hookLog
				opts := []Option{h.opt(), WithFailurePolicy(pol), WithPrefix(fmt.Sprintf("starvedtiny%d%v:", i, pol))}
				if hybrid {
					opts = append(opts, WithHybrid(5*time.Millisecond, 2))
				}
				var l *Limiter
				if pol == FailOpen {
					l = fullLimiter(t, c, opts...)
				} else {
					l = mustNew(t, c, engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
				}
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
				sh := floodShape{callers: 128, spinners: 16, maxDeadline: 3 * time.Millisecond, noDeadline: 4}
				var ft *floodTally
				for r := 0; r < rounds && l.Stats().BreakerOpens == 0; r++ {
					ft = floodWith(l, "k", sh, 2*time.Second)
				}
				runtime.GOMAXPROCS(2)
				st := l.Stats()
				t.Logf("%s", report(ft, st))
				for j, err := range h.all() {
					if j < 3 {
						t.Logf("OnError: %v", err)
					}
				}
				if st.BreakerOpens != 0 || st.FallbackDecisions != 0 || ft.unavailable.Load() != 0 || pol == FailOpen && ft.admitted.Load() != 0 {
					t.Errorf("Redis answered throughout, yet BreakerOpens %d, FallbackDecisions %d, policy answers %d, admitted %d (past the limit if FailOpen)",
						st.BreakerOpens, st.FallbackDecisions, ft.unavailable.Load(), ft.admitted.Load())
					// The verdicts' causes say which judge found the silence:
					// the check's connection (checkconn.go) or the ticks
					// (liveness.go: a dial in progress, connections lost).
					for _, err := range h.all() {
						if strings.Contains(err.Error(), "confirmation:") {
							t.Logf("verdict: %v", err)
						}
					}
				}
			})
		}
	}
}

// floodShape is a flood of floodWith: how many callers, how many spinning
// goroutines, the callers' deadlines (0 … maxDeadline; negative: already
// past), and how often one calls with no deadline (every noDeadline-th).
type floodShape struct {
	callers, spinners int
	maxDeadline       time.Duration
	past              bool // every deadline already passed at the call
	noDeadline        int
	cancelEarly       bool // half the callers cancel their context at once, in another goroutine
}

func floodWith(l *Limiter, key string, sh floodShape, d time.Duration) *floodTally {
	var ft floodTally
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range sh.spinners {
		wg.Go(func() {
			x := uint64(1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for range 1 << 12 {
					x = x*6364136223846793005 + 1442695040888963407
				}
				if x == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	for i := range sh.callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 28))
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.Background(), context.CancelFunc(func() {})
				switch {
				case sh.noDeadline > 0 && i%sh.noDeadline == 0:
				case sh.past:
					cx, cancel = context.WithDeadline(cx, time.Now().Add(-time.Duration(rng.Int64N(int64(time.Millisecond)))))
				case sh.cancelEarly && i%2 == 1:
					cx, cancel = context.WithCancel(cx)
					go cancel()
				default:
					cx, cancel = context.WithTimeout(cx, time.Duration(rng.Int64N(int64(sh.maxDeadline)+1)))
				}
				dec, err := l.AllowN(cx, key, 1)
				cancel()
				ft.add(dec, err)
			}
		})
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	return &ft
}

// The promise (docs/design.md §10, WithBreaker): the breaker "opens on
// Redis's failure, never on the process's own delay"; a busy process opens
// no breaker, enters no failure state, makes no policy decision, admits
// nothing past the limit. Here the process is starved harder than in
// TestBusyProcessIsNoOutage: GOMAXPROCS 1 and many spinning goroutines
// (so a reader woken by the poller waits behind every spinner's 10 ms
// slice), on a healthy local redis-server, with the client's ReadTimeout
// at its smallest useful values (the budget is then 250 ms).
func TestStarvedProcessIsNoOutage(t *testing.T) {
	s := redistest.Start(t)
	type tc struct {
		procs   int
		readTO  time.Duration
		ctxTO   bool
		hybrid  bool
		shape   floodShape
		seconds int
	}
	var cases []tc
	spin := []int{64, 256}
	if !longRuns() {
		spin = []int{128}
	}
	for _, hybrid := range []bool{false, true} {
		for _, sp := range spin {
			for _, rto := range []time.Duration{0, 50 * time.Millisecond} {
				cases = append(cases, tc{procs: 1, readTO: rto, hybrid: hybrid, shape: floodShape{callers: 128, spinners: sp, maxDeadline: 3 * time.Millisecond, noDeadline: 8}, seconds: 2})
			}
		}
	}
	for i, c := range cases {
		name := fmt.Sprintf("hybrid=%v/procs=%d/spinners=%d/ReadTimeout=%v", c.hybrid, c.procs, c.shape.spinners, c.readTO)
		t.Run(name, func(t *testing.T) {
			if c.hybrid || c.readTO != 0 {
				longOnly(t)
			}
			cl := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: c.readTO, ContextTimeoutEnabled: c.ctxTO})
			defer cl.Close()
			opts := []Option{WithFailurePolicy(FailOpen), WithPrefix(fmt.Sprintf("starve%d:", i))}
			if c.hybrid {
				opts = append(opts, WithHybrid(5*time.Millisecond, 2))
			}
			var h hookLog
			l := fullLimiter(t, cl, append(opts, h.opt())...)
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.procs))
			ft := floodWith(l, "k", c.shape, time.Duration(c.seconds)*time.Second)
			runtime.GOMAXPROCS(2)
			st := l.Stats()
			t.Logf("%s", report(ft, st))
			for j, err := range h.all() {
				if j < 3 {
					t.Logf("OnError: %v", err)
				}
			}
			if ft.admitted.Load() != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
				t.Errorf("Redis answered throughout, yet: %d admitted past the limit, BreakerOpens %d, FallbackDecisions %d", ft.admitted.Load(), st.BreakerOpens, st.FallbackDecisions)
			}
		})
	}
}
