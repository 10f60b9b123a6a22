package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// floodCase is one run of the busy-process flood (TestBusyProcessIsNoOutage).
type floodCase struct {
	name    string
	hybrid  bool
	policy  Option
	full    bool // the key is full (Strict 5 per minute, 5 units in Redis); else far from its limit
	patient bool // 32 patient callers (5 s deadlines) beside the flood, the key far from its limit
}

// floodTally is what a flood's callers saw: the flood's callers, and the
// patient ones (5 s deadlines) beside them.
type floodTally struct {
	calls, admitted, unavailable, gone, other atomic.Int64
	patientCalls, patientRefused              atomic.Int64 // patientRefused: refused with ErrUnavailable
	firstOther                                atomic.Value
}

func (ft *floodTally) add(dec engine.Decision, err error) {
	ft.calls.Add(1)
	if dec.Allowed {
		ft.admitted.Add(1)
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable):
		ft.unavailable.Add(1)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		ft.gone.Add(1)
	default:
		ft.other.Add(1)
		ft.firstOther.CompareAndSwap(nil, err.Error())
	}
}

// flood runs the set-up of issue 27's first finding against l for d: 128
// callers deciding one unit of key, most with deadlines of 0–3 ms (one in
// eight with none), beside 16 goroutines that spin (the process is short
// of CPU; Redis, a local redis-server, answers every command at once);
// and, if patient, 32 more callers with 5 s deadlines.
func flood(l *Limiter, key string, patient bool, d time.Duration) *floodTally {
	const callers, spinners, patients = 128, 16, 32
	var ft floodTally
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range spinners {
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
	for i := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 27))
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.Background(), context.CancelFunc(func() {})
				if i%8 != 0 {
					cx, cancel = context.WithTimeout(cx, time.Duration(rng.Int64N(int64(3*time.Millisecond))))
				}
				dec, err := l.AllowN(cx, key, 1)
				cancel()
				ft.add(dec, err)
			}
		})
	}
	for range patients * btoi(patient) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				dec, err := l.AllowN(cx, key, 1)
				cancel()
				ft.add(dec, err)
				ft.patientCalls.Add(1)
				if errors.Is(err, ErrUnavailable) && !dec.Allowed {
					ft.patientRefused.Add(1)
				}
			}
		})
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	return &ft
}

// A busy process is not a Redis outage. Issue 27's flood: a local
// redis-server that answers at once, 128 callers on one key (most with
// 0–3 ms deadlines) beside 16 goroutines that spin, on a machine of 2
// cores, for 2 s, in the plain and the hybrid mode, under each policy;
// and the FailClosed variant with patient callers (5 s deadlines) on a key
// far from its limit. Redis answers throughout, so whatever the machine's
// speed: no breaker opens, no failure state is entered, no decision is the
// policy's, and on the full key nothing is admitted. Before the failure
// detection judged by the process's own time, the plain mode's stall rule
// (no reply for 100 ms) and the hybrid flush's 500 ms deadline blamed
// Redis: FailOpen admitted 67,360 to 287,916 calls on the full key, and
// FailClosed refused 65,780 of 65,882 patient callers.
func TestBusyProcessIsNoOutage(t *testing.T) {
	d := 2 * time.Second
	s := redistest.Start(t)
	full := engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}
	roomy := engine.Config{Limit: 1 << 30, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}
	var cases []floodCase
	for _, hybrid := range []bool{false, true} {
		for _, p := range []struct {
			name string
			opt  Option
		}{{"FailOpen", WithFailurePolicy(FailOpen)}, {"FailClosed", WithFailurePolicy(FailClosed)}, {"FallbackLocal", WithFallbackLocal(1)}} {
			cases = append(cases, floodCase{name: p.name + "/full", hybrid: hybrid, policy: p.opt, full: true})
		}
		cases = append(cases, floodCase{name: "FailClosed/patient", hybrid: hybrid, policy: WithFailurePolicy(FailClosed), patient: true})
	}
	for i, tc := range cases {
		mode := "plain"
		if tc.hybrid {
			mode = "hybrid"
		}
		t.Run(mode+"/"+tc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: s.Addr()}) // go-redis's defaults
			defer c.Close()
			cfg := roomy
			if tc.full {
				cfg = full
			}
			opts := []Option{tc.policy, WithPrefix(fmt.Sprintf("flood%d:", i))}
			if tc.hybrid {
				opts = append(opts, WithHybrid(5*time.Millisecond, 2))
			}
			l := mustNew(t, c, cfg, opts...)
			key := "k"
			if tc.full {
				if dec, err := l.AllowN(ctx, key, cfg.Limit); err != nil || !dec.Allowed {
					t.Fatalf("filling the key: %+v %v", dec, err)
				}
			}
			ft := flood(l, key, tc.patient, d)
			st := l.Stats()
			t.Logf("%s %s: %d calls, %d admitted, %d policy answers, %d callers gone, patient callers refused with ErrUnavailable %d of %d; BreakerOpens %d, Failures %d, FallbackDecisions %d; %+v",
				mode, tc.name, ft.calls.Load(), ft.admitted.Load(), ft.unavailable.Load(), ft.gone.Load(), ft.patientRefused.Load(), ft.patientCalls.Load(),
				st.BreakerOpens, st.Failures, st.FallbackDecisions, st)
			if st.BreakerOpens != 0 || st.FallbackDecisions != 0 || ft.unavailable.Load() != 0 {
				t.Errorf("Redis answered throughout, yet the limiter blamed it: BreakerOpens %d, FallbackDecisions %d, %d answers wrapping ErrUnavailable",
					st.BreakerOpens, st.FallbackDecisions, ft.unavailable.Load())
			}
			if tc.full && ft.admitted.Load() != 0 {
				t.Errorf("%d calls admitted on a key that was full for the whole run", ft.admitted.Load())
			}
			if n := ft.patientRefused.Load(); n != 0 {
				t.Errorf("%d of %d patient callers refused with ErrUnavailable on a key far from its limit", n, ft.patientCalls.Load())
			}
			if n := ft.other.Load(); n != 0 {
				t.Errorf("%d answers with an unexpected error, the first: %v", n, ft.firstOther.Load())
			}
			if err := l.Close(); err != nil { // a hybrid limiter's last flush
				t.Fatal(err)
			}
			if !tc.full {
				if got := storedUnits(t, c, l, key); got < ft.admitted.Load() {
					t.Errorf("Redis holds %d units, fewer than the %d admitted", got, ft.admitted.Load())
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Killed connections on a busy process are no outage: the flood above
// (FailOpen, the key full) while another client kills every other
// client's connection (CLIENT KILL TYPE normal) every 20 ms. A lost
// connection on a server that accepts new ones and answers is not an
// outage, however long the busy process takes to see the reply: nothing
// is admitted, no policy decides, no breaker opens. Before, the
// confirmation's check was killed with the callers' connections and its
// retries waited on the busy pool, and FailOpen admitted 37,945 calls.
func TestKilledConnectionsUnderFloodAreNoOutage(t *testing.T) {
	for _, hybrid := range []bool{false, true} {
		t.Run(fmt.Sprint("hybrid=", hybrid), func(t *testing.T) {
			s := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: s.Addr()}) // go-redis's defaults
			defer c.Close()
			opts := []Option{WithFailurePolicy(FailOpen)}
			if hybrid {
				opts = append(opts, WithHybrid(5*time.Millisecond, 2))
			}
			l := mustNew(t, c, engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
			if d, err := l.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
				t.Fatalf("filling the key: %+v %v", d, err)
			}
			admin := client(t, s)
			stop := make(chan struct{})
			killed := make(chan int64)
			go func() {
				var n int64
				defer func() { killed <- n }()
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					if k, err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Int64(); err == nil {
						n += k
					}
				}
			}()
			ft := flood(l, "k", false, 2*time.Second)
			close(stop)
			kills := <-killed
			st := l.Stats()
			t.Logf("%d calls, %d admitted, %d policy answers, %d callers gone; %d connections killed; %+v",
				ft.calls.Load(), ft.admitted.Load(), ft.unavailable.Load(), ft.gone.Load(), kills, st)
			if kills == 0 {
				t.Fatal("no connection was killed")
			}
			if ft.admitted.Load() != 0 || ft.unavailable.Load() != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
				t.Errorf("killed connections on a healthy server were taken for an outage: %d admitted, %d policy answers, %+v", ft.admitted.Load(), ft.unavailable.Load(), st)
			}
		})
	}
}

// fullKey is issue 27's full key: Strict 5 per minute, filled before
// a flood, so that any admission during it is one past the limit.
var fullKey = engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}

// longRuns reports whether the long variants of the load tests run
// (RINGLIMIT_ATTACK=1, docs/contributing.md): more rounds, more client
// options, the hybrid mode beside the plain one.
func longRuns() bool { return os.Getenv("RINGLIMIT_ATTACK") != "" }

// fullLimiter returns a limiter on c with opts whose key "k" is full.
func fullLimiter(t *testing.T, c redis.UniversalClient, opts ...Option) *Limiter {
	t.Helper()
	l := mustNew(t, c, fullKey, opts...)
	// A round trip may get no reply (ErrNoReply, a tiny ReadTimeout) and
	// still be counted: fill until Redis answers, admitted or denied. How
	// many tries that takes depends on the machine's speed (a 1 ms
	// ReadTimeout on a loaded machine), so only a hang bound limits them.
	var err error
	for start := time.Now(); time.Since(start) < hangBound; {
		var d engine.Decision
		if d, err = l.AllowN(ctx, "k", fullKey.Limit); err == nil {
			if d.Remaining != 0 {
				t.Fatalf("filling the key: %+v", d)
			}
			return l
		}
	}
	t.Fatalf("filling the key: no reply within %v; last: %v", hangBound, err)
	return nil
}

// report is a flood's outcome in one line, for logs.
func report(ft *floodTally, st Stats) string {
	return fmt.Sprintf("%d calls, %d admitted, %d policy answers, %d callers gone, %d other (first: %v); BreakerOpens %d, Failures %d, FallbackDecisions %d, NoReply %d, CallerGone %d",
		ft.calls.Load(), ft.admitted.Load(), ft.unavailable.Load(), ft.gone.Load(), ft.other.Load(), ft.firstOther.Load(),
		st.BreakerOpens, st.Failures, st.FallbackDecisions, st.NoReply, st.CallerGone)
}

// longOnly skips t unless the long variants run (longRuns).
func longOnly(t *testing.T) {
	t.Helper()
	if !longRuns() {
		t.Skip("a long variant: RINGLIMIT_ATTACK=1 runs it")
	}
}
