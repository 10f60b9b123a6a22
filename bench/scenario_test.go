package bench_test

import (
	"fmt"
	"math/rand"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// benchT0 is the fixed instant every AllowAt benchmark and test starts from. It
// is a whole second, so it starts a sub-window of every geometry used here.
var benchT0 = time.Unix(1_700_000_000, 0)

// benchAlgs are the algorithms every engine case runs for.
var benchAlgs = []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow}

// benchSink keeps the baselines' results observable, so that the compiler
// cannot drop the work being measured.
var benchSink atomic.Int64

// benchClock is how a case gets its time.
type benchClock int

const (
	// benchClockAt: AllowAt with a caller-supplied time, benchT0 plus one
	// nanosecond per iteration (per goroutine when parallel).
	benchClockAt benchClock = iota
	// benchClockPrecise: Allow on the engine's default monotonic clock.
	benchClockPrecise
	// benchClockCoarse: Allow on the engine's coarse clock (1ms).
	benchClockCoarse
)

func (c benchClock) String() string {
	switch c {
	case benchClockAt:
		return "at"
	case benchClockPrecise:
		return "precise"
	case benchClockCoarse:
		return "coarse"
	}
	return "clock(" + strconv.Itoa(int(c)) + ")"
}

// benchKeysLabel names a key count: 1, 1e3, 1e6, 1e7.
func benchKeysLabel(n int) string {
	e := 0
	m := n
	for m >= 10 && m%10 == 0 {
		m /= 10
		e++
	}
	if e < 3 {
		return strconv.Itoa(n)
	}
	return strconv.Itoa(m) + "e" + strconv.Itoa(e)
}

func benchModeLabel(parallel bool) string {
	if parallel {
		return "parallel"
	}
	return "serial"
}

// benchKeys returns n distinct keys, each its own allocation. A single key
// is "hot-key".
func benchKeys(n int) []string {
	if n == 1 {
		return []string{"hot-key"}
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// benchRNG is a xorshift64 generator: cheap, allocation-free and owned by one
// goroutine, for walking a key slice uniformly.
type benchRNG struct{ x uint64 }

func newBenchRNG(seed uint64) benchRNG { return benchRNG{x: seed*0x9e3779b97f4a7c15 | 1} }

// intn returns a value in [0, n), n ≤ 2^32.
func (r *benchRNG) intn(n int) int {
	r.x ^= r.x << 13
	r.x ^= r.x >> 7
	r.x ^= r.x << 17
	return int((r.x >> 32) * uint64(n) >> 32)
}

// benchCase is one sub-benchmark of BenchmarkAllow. The framework calls run
// several times with growing b.N; run may build its state on the first call
// and keep it, and cleanup releases it after the sub-benchmark is done.
type benchCase struct {
	name    string
	run     func(b *testing.B)
	cleanup func()
}

// BenchmarkAllow measures the decision path for existing keys, and beside
// it, in the same run, the baselines it is judged against:
//
//	alg=…/clock=…/keys=…[/deny]/serial|parallel  the engine
//	baseline=atomic-add/…                        one atomic.Int64 Add
//	baseline=hash-map-sum/keys=…/…               xxhash + xsync.MapOf Load +
//	                                             one atomic Add + sum of 11 slots
//	baseline=time.Now/…, baseline=time.Since/…   the clock read alone
//
// Every key a case uses exists before the timer starts, so every case must
// report 0 allocs/op.
func BenchmarkAllow(b *testing.B) {
	var cases []benchCase
	for _, alg := range benchAlgs {
		for _, clk := range []benchClock{benchClockAt, benchClockPrecise, benchClockCoarse} {
			for _, par := range []bool{false, true} {
				cases = append(cases, benchEngineCase(alg, clk, 1, false, par))
			}
		}
		cases = append(cases,
			benchEngineCase(alg, benchClockAt, 1_000, false, false),
			benchEngineCase(alg, benchClockAt, 1_000, false, true),
			benchEngineCase(alg, benchClockAt, 1_000_000, false, true),
			benchZipfCase(alg, 100_000),
		)
		for _, clk := range []benchClock{benchClockAt, benchClockPrecise, benchClockCoarse} {
			for _, par := range []bool{false, true} {
				cases = append(cases, benchEngineCase(alg, clk, 1, true, par))
			}
		}
	}
	cases = append(cases, baselineCases()...)

	for _, c := range cases {
		func() {
			defer c.cleanup()
			b.Run(c.name, func(b *testing.B) {
				b.ReportAllocs()
				c.run(b)
			})
		}()
	}
}

// benchEngineCase returns the case for alg on nkeys existing keys. With
// deny the limit is 100 and the (single) key is filled before the timer, so
// the measured requests take the deny path; otherwise the limit is MaxLimit
// and every measured request must be admitted.
func benchEngineCase(alg engine.Algorithm, clk benchClock, nkeys int, deny, parallel bool) benchCase {
	name := fmt.Sprintf("alg=%v/clock=%v/keys=%s", alg, clk, benchKeysLabel(nkeys))
	if deny {
		name += "/deny"
	}
	name += "/" + benchModeLabel(parallel)

	var e *engine.Engine
	var keys []string
	return benchCase{
		name: name,
		run: func(b *testing.B) {
			if e == nil {
				e, keys = newBenchEngine(b, alg, clk, keys, nkeys, deny)
			}
			if deny {
				benchFill(b, e, clk, keys[0])
			}
			b.ResetTimer()
			var denied int64
			if parallel {
				denied = benchAllowParallel(b, e, clk, keys)
			} else {
				denied = benchAllowSerial(b, e, clk, keys)
			}
			b.StopTimer()
			switch {
			case deny:
				b.ReportMetric(float64(int64(b.N)-denied)/float64(b.N), "allowed/op")
			case denied != 0:
				b.Errorf("%d of %d requests denied with Limit = MaxLimit", denied, b.N)
			}
		},
		cleanup: func() {
			if e != nil {
				e.Close()
				e, keys = nil, nil
			}
		},
	}
}

// newBenchEngine builds the engine of one case and inserts its keys.
func newBenchEngine(b *testing.B, alg engine.Algorithm, clk benchClock, keys []string, nkeys int, deny bool) (*engine.Engine, []string) {
	b.Helper()
	cfg := engine.Config{Limit: engine.MaxLimit, Window: time.Second, SubWindows: 10, Algorithm: alg}
	if deny {
		cfg.Limit = 100
	}
	switch clk {
	case benchClockAt:
		// AllowAt's timeline (2023) is unrelated to the engine's clock,
		// by which the sweeper judges idleness: it would retire the keys.
		cfg.DisableEviction = true
	case benchClockCoarse:
		cfg.CoarseClock = time.Millisecond
	}
	if nkeys > 1 {
		// Keys that wait longer than Window for their turn must not be
		// reclaimed and recreated inside the timed loop.
		cfg.DisableEviction = true
	}
	e, err := engine.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if keys == nil {
		keys = benchKeys(nkeys)
	}
	for _, k := range keys {
		var d engine.Decision
		if clk == benchClockAt {
			d = e.AllowAt(k, 1, benchT0)
		} else {
			d = e.AllowN(k, 1)
		}
		if !d.Allowed {
			e.Close()
			b.Fatalf("inserting %q: %+v", k, d)
		}
	}
	if got := e.Len(); got != int64(nkeys) {
		e.Close()
		b.Fatalf("engine holds %d keys, want %d", got, nkeys)
	}
	return e, keys
}

// benchFill admits requests for key until one is denied.
func benchFill(b *testing.B, e *engine.Engine, clk benchClock, key string) {
	b.Helper()
	for range 1000 {
		var ok bool
		if clk == benchClockAt {
			ok = e.AllowAt(key, 1, benchT0).Allowed
		} else {
			ok = e.Allow(key)
		}
		if !ok {
			return
		}
	}
	b.Fatalf("key %q still admits requests after 1000", key)
}

// benchAllowSerial makes b.N requests of one unit and returns how many were
// denied. One key is requested directly; several are picked uniformly.
func benchAllowSerial(b *testing.B, e *engine.Engine, clk benchClock, keys []string) (denied int64) {
	if len(keys) == 1 {
		key := keys[0]
		if clk == benchClockAt {
			for i := range b.N {
				if !e.AllowAt(key, 1, benchAt(i)).Allowed {
					denied++
				}
			}
		} else {
			for range b.N {
				if !e.Allow(key) {
					denied++
				}
			}
		}
		return denied
	}
	r := newBenchRNG(1)
	n := len(keys)
	if clk == benchClockAt {
		for i := range b.N {
			if !e.AllowAt(keys[r.intn(n)], 1, benchAt(i)).Allowed {
				denied++
			}
		}
	} else {
		for range b.N {
			if !e.Allow(keys[r.intn(n)]) {
				denied++
			}
		}
	}
	return denied
}

// benchAllowParallel is benchAllowSerial under b.RunParallel: each
// goroutine has its own time offset and its own generator.
func benchAllowParallel(b *testing.B, e *engine.Engine, clk benchClock, keys []string) int64 {
	var denied, seeds atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		var d, i int64
		if len(keys) == 1 {
			key := keys[0]
			if clk == benchClockAt {
				for ; pb.Next(); i++ {
					if !e.AllowAt(key, 1, benchAt(i)).Allowed {
						d++
					}
				}
			} else {
				for pb.Next() {
					if !e.Allow(key) {
						d++
					}
				}
			}
			denied.Add(d)
			return
		}
		r := newBenchRNG(uint64(seeds.Add(1)))
		n := len(keys)
		if clk == benchClockAt {
			for ; pb.Next(); i++ {
				if !e.AllowAt(keys[r.intn(n)], 1, benchAt(i)).Allowed {
					d++
				}
			}
		} else {
			for pb.Next() {
				if !e.Allow(keys[r.intn(n)]) {
					d++
				}
			}
		}
		denied.Add(d)
	})
	return denied.Load()
}

// benchZipfCase is a multi-tenant load: nkeys tenants, all inserted before
// the timer, drawn by each goroutine from its own Zipf(s = 1.1) generator, so
// a few tenants are hot and most are cold, as in a real gateway.
func benchZipfCase(alg engine.Algorithm, nkeys int) benchCase {
	var e *engine.Engine
	var keys []string
	return benchCase{
		name: fmt.Sprintf("alg=%v/clock=at/keys=%s-zipf/parallel", alg, benchKeysLabel(nkeys)),
		run: func(b *testing.B) {
			if e == nil {
				e, keys = newBenchEngine(b, alg, benchClockAt, nil, nkeys, false)
			}
			// Zipf draws cost more than a decision (a log and an exp each),
			// so each goroutine replays a table drawn before the timer.
			draws := make([][]uint32, runtime.GOMAXPROCS(0))
			for g := range draws {
				z := rand.NewZipf(rand.New(rand.NewSource(int64(g)+1)), 1.1, 1, uint64(nkeys-1))
				draws[g] = make([]uint32, 1<<16)
				for j := range draws[g] {
					draws[g][j] = uint32(z.Uint64())
				}
			}
			var seeds, denied atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				tab := draws[int(seeds.Add(1)-1)%len(draws)]
				var d, i int64
				for ; pb.Next(); i++ {
					if !e.AllowAt(keys[tab[i&(1<<16-1)]], 1, benchAt(i)).Allowed {
						d++
					}
				}
				denied.Add(d)
			})
			b.StopTimer()
			if denied.Load() != 0 {
				b.Errorf("%d requests denied with Limit = MaxLimit", denied.Load())
			}
		},
		cleanup: func() {
			if e != nil {
				e.Close()
				e, keys = nil, nil
			}
		},
	}
}

// benchTimes are the instants the clock=at cases pass to AllowAt: time
// moves 1µs every 1024 requests, so the harness pays an array index rather
// than a time.Add per request (which would be charged to the engine).
var benchTimes = func() []time.Time {
	ts := make([]time.Time, 1<<16)
	for i := range ts {
		ts[i] = benchT0.Add(time.Duration(i) * time.Microsecond)
	}
	return ts
}()

func benchAt[I int | int64](i I) time.Time { return benchTimes[int(i>>10)&(len(benchTimes)-1)] }
