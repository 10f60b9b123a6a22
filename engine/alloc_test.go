package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// TestAllowAllocatesNothingForExistingKey checks that a decision on a key
// the engine already holds does not allocate, on the allowed and the denied
// path, through AllowAt, AllowN and Allow, for every algorithm and clock.
// With the manual clock every outcome is also checked exactly; with the real
// clocks the window may move during the test, so only at least one request
// is required to take the path under test.
func TestAllowAllocatesNothingForExistingKey(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, clk := range []string{"manual", "precise", "coarse"} {
			for _, deny := range []bool{false, true} {
				path := "allowed"
				if deny {
					path = "denied"
				}
				t.Run(fmt.Sprintf("alg=%v/clock=%s/%s", alg, clk, path), func(t *testing.T) {
					testAllocsExistingKey(t, alg, clk, deny)
				})
			}
		}
	}
}

func testAllocsExistingKey(t *testing.T, alg engine.Algorithm, clk string, deny bool) {
	limit := int64(engine.MaxLimit)
	if alg == engine.SlidingLog {
		limit = engine.DefaultMaxLogLimit // a timestamp per unit; far above the requests made here
	}
	if deny {
		limit = 100
	}
	cfg := engine.Config{
		Limit:      limit,
		Window:     time.Second,
		SubWindows: 10,
		Algorithm:  alg,
		// No background sweep inside the measurement: a sweep is not on
		// the decision path, and AllowAt's t0 is far from the real clocks.
		DisableEviction: true,
	}
	exact := false
	switch clk {
	case "manual":
		cfg.Clock = engine.NewManualClock(t0)
		exact = true
	case "coarse":
		cfg.CoarseClock = time.Millisecond
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	const key = "existing-key"
	// The key's first request creates it (and allocates); with deny, fill
	// it. AllowAt runs at t0, Allow and AllowN on the engine's clock, so
	// with a real clock the key is filled on both timelines.
	if d := e.AllowAt(key, 1, t0); !d.Allowed {
		t.Fatalf("first AllowAt: %+v", d)
	}
	if d := e.AllowN(key, 1); !d.Allowed {
		t.Fatalf("first AllowN: %+v", d)
	}
	if deny {
		if d := e.AllowAt(key, limit, t0); d.Allowed || d.Reason() != engine.ReasonLimited {
			t.Fatalf("AllowAt(%d) on a partly used key: %+v, want limited", limit, d)
		}
		for e.AllowAt(key, 1, t0).Allowed {
		}
		for e.Allow(key) {
		}
	}
	want := !deny

	check := func(name string, f func() bool) {
		t.Helper()
		var match, runs int
		allocs := testing.AllocsPerRun(100, func() {
			runs++
			if f() == want {
				match++
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocs per run, want 0", name, allocs)
		}
		if exact && match != runs || match == 0 {
			t.Errorf("%s: %d of %d runs had Allowed = %v", name, match, runs, want)
		}
	}
	check("AllowAt", func() bool { return e.AllowAt(key, 1, t0).Allowed })
	check("AllowN", func() bool { return e.AllowN(key, 1).Allowed })
	check("Allow", func() bool { return e.Allow(key) })

	// Requests that record nothing: a peek (n = 0) is allowed, n above the
	// limit is refused; neither may allocate either.
	var d engine.Decision
	allocs := testing.AllocsPerRun(100, func() { d = e.AllowN(key, 0) })
	if allocs != 0 || !d.Allowed {
		t.Errorf("AllowN(0): %v allocs per run, decision %+v; want 0, allowed", allocs, d)
	}
	allocs = testing.AllocsPerRun(100, func() { d = e.AllowAt(key, limit+1, t0) })
	if allocs != 0 || d.Reason() != engine.ReasonNever {
		t.Errorf("AllowAt(limit+1): %v allocs per run, decision %+v; want 0, too-large", allocs, d)
	}
}

// TestReserveAllocatesNothingForExistingKey: Reserve, Cancel and AllowAll
// on keys the engines hold, admitted and refused, allocate nothing.
func TestReserveAllocatesNothingForExistingKey(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			mk := func(limit int64, w time.Duration) *engine.Engine {
				return newEngine(t, engine.Config{Limit: limit, Window: w, Algorithm: alg, Clock: clk, DisableEviction: true})
			}
			a, b, c := mk(10_000, time.Second), mk(1000, time.Hour), mk(10, time.Minute)
			for _, e := range []*engine.Engine{a, b, c} {
				require.True(t, e.AllowN("k", 1).Allowed)
			}
			var ok, cancelled int
			allocs := testing.AllocsPerRun(100, func() {
				r := a.ReserveAt("k", 1, t0)
				if r.Decision().Allowed {
					ok++
				}
				if r.Cancel() {
					cancelled++
				}
			})
			require.Zero(t, allocs, "ReserveAt + Cancel")
			require.Equal(t, 101, ok)
			require.Equal(t, 101, cancelled)
			allocs = testing.AllocsPerRun(100, func() {
				r := a.Reserve("k", 1)
				r.Cancel()
			})
			require.Zero(t, allocs, "Reserve + Cancel")

			reqs := []engine.Request{{Engine: a, Key: "k", N: 1}, {Engine: b, Key: "k", N: 1}, {Engine: c, Key: "k", N: 9}}
			var idx int
			allocs = testing.AllocsPerRun(100, func() { idx, _ = engine.AllowAll(t0, reqs...) })
			require.Zero(t, allocs, "AllowAll")
			require.Equal(t, 2, idx, "c is full after its first: every call is refused by c, and undone")
			require.Equal(t, int64(9998), a.AllowAt("k", 0, t0).Remaining, "one AllowAll was admitted; the refused ones returned a's unit")

			reqs[2].N = 0
			allocs = testing.AllocsPerRun(100, func() { idx, _ = engine.AllowAll(t0, reqs...) })
			require.Zero(t, allocs, "AllowAll admitted")
			require.Equal(t, -1, idx)

			// Refused reservations.
			require.False(t, c.AllowAt("k", 1, t0).Allowed, "c is full")
			allocs = testing.AllocsPerRun(100, func() {
				r := c.ReserveAt("k", 1, t0)
				if r.Decision().Allowed || r.Cancel() {
					t.Error("c is full")
				}
			})
			require.Zero(t, allocs, "ReserveAt refused")
		})
	}
}

func TestReserveAndCancelAllocs(t *testing.T) {
	if raceOn {
		t.Skip("race")
	}
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 1000, Window: time.Second, Algorithm: alg, DisableEviction: true, PerKeyLimits: true})
		f := newEngineNoCloseCheck(t, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: alg, DisableEviction: true})
		now := t0
		e.AllowAt("k", 1, now)
		f.AllowAt("k", 1, now)
		key := string([]byte("k"))
		cases := map[string]func(){
			"reserve+cancel": func() {
				r := e.ReserveAt(key, 1, now)
				r.Cancel()
			},
			"reserve+cancel after moving on": func() {
				r := e.ReserveAt(key, 1, now)
				now = now.Add(150 * time.Millisecond)
				e.AllowAt(key, 1, now)
				r.Cancel()
			},
			"allowall": func() {
				engine.AllowAll(now, engine.Request{Engine: e, Key: key, N: 1}, engine.Request{Engine: f, Key: key, N: 1})
			},
			"allowall denied": func() {
				engine.AllowAll(now, engine.Request{Engine: e, Key: key, N: 1}, engine.Request{Engine: f, Key: key, N: 5000})
			},
			"reserve denied": func() {
				r := e.ReserveAt(key, 5000, now)
				r.Cancel()
			},
			// A window on each time, so that debts never pile up in a log.
			"reserve+settle fewer": func() {
				now = now.Add(time.Second)
				r := e.ReserveAt(key, 3, now)
				r.SettleAt(1, now)
			},
			"reserve+settle more": func() {
				now = now.Add(time.Second)
				r := e.ReserveAt(key, 3, now)
				r.SettleAt(7, now)
			},
			"charge": func() {
				now = now.Add(time.Second)
				e.ChargeAt(key, 5, now)
			},
		}
		for name, fn := range cases {
			fn()
			if a := testing.AllocsPerRun(200, fn); a != 0 {
				t.Errorf("%v %s: %v allocs", alg, name, a)
			}
		}
		if alg == engine.SlidingLog {
			// cancel after growth
			e.AllowAt("g", 1, now)
			r0 := e.ReserveAt("g", 1, now)
			if err := e.SetLimitAt("g", 5000, now); err != nil {
				t.Fatal(err)
			}
			if !r0.Cancel() {
				t.Error("cancel after grow false")
			}
			a := testing.AllocsPerRun(50, func() {
				r := e.ReserveAt("g", 1, now)
				r.Cancel()
			})
			if a != 0 {
				t.Errorf("log grown: %v", a)
			}
		}
	}
}

// AllowAll allocates nothing with ≤ 8 requests on existing keys, admitted
// or refused, for every algorithm, audited or not.
func TestAllowAllAllocs(t *testing.T) {
	if raceOn {
		t.Skip("allocation counts are meaningless under -race")
	}
	for _, alg := range allAlgorithms {
		for _, audit := range []float64{0, 1} {
			for _, n := range []int{1, 2, 8} {
				t.Run(fmt.Sprintf("%v/audit=%v/%d", alg, audit, n), func(t *testing.T) {
					e := newEngineNoCloseCheck(t, engine.Config{Limit: 1 << 20, Window: time.Second, Algorithm: alg, Audit: audit, DisableEviction: true, MaxLogLimit: 1 << 20})
					e2 := newEngineNoCloseCheck(t, engine.Config{Limit: 3, Window: time.Second, Algorithm: alg, Audit: audit, DisableEviction: true})
					reqs := make([]engine.Request, n)
					for i := range reqs {
						reqs[i] = engine.Request{Engine: e, Key: fmt.Sprint("k", i%3), N: 1}
						e.AllowAt(reqs[i].Key, 0, t0)
						e.AllowAt(reqs[i].Key, 1, t0)
					}
					// Stop the audit's drain goroutine, whose allocations
					// AllocsPerRun would count; decisions still buffer.
					e.Close()
					e2.Close()
					now := t0
					a := testing.AllocsPerRun(200, func() {
						now = now.Add(time.Microsecond)
						engine.AllowAll(now, reqs...)
					})
					if a != 0 {
						t.Errorf("admitted: %v allocs", a)
					}
					e2.AllowAt("full", 3, t0)
					reqs[n-1] = engine.Request{Engine: e2, Key: "full", N: 1}
					a = testing.AllocsPerRun(200, func() {
						now = now.Add(time.Microsecond)
						engine.AllowAll(now, reqs...)
					})
					if a != 0 {
						t.Errorf("refused: %v allocs", a)
					}
				})
			}
		}
	}
}

// More than 8 requests "take one slice of Reservations from the heap".
func TestAllowAllAllocsHeap(t *testing.T) {
	if raceOn {
		t.Skip()
	}
	for _, n := range []int{9, 10, 64, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// No Audit: its drain goroutine allocates while AllocsPerRun counts.
			e := newEngineNoCloseCheck(t, engine.Config{Limit: 1 << 30, Window: time.Second, DisableEviction: true})
			reqs := make([]engine.Request, n)
			for i := range reqs {
				reqs[i] = engine.Request{Engine: e, Key: fmt.Sprint("k", i%5), N: 1}
				e.AllowAt(reqs[i].Key, 1, t0)
			}
			now := t0
			a := testing.AllocsPerRun(100, func() {
				now = now.Add(time.Microsecond)
				engine.AllowAll(now, reqs...)
			})
			if a > 1 {
				t.Errorf("%d requests: %v allocs, want 1", n, a)
			}
		})
	}
}

// No allocation on the hot path for existing keys, every algorithm,
// per-key limits, denials with detail, a 1 MiB key.
func TestHotPathAllocatesNothing(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		e := newEngine(t, engine.Config{Limit: 2, Window: time.Second, Algorithm: alg, PerKeyLimits: true, DisableEviction: true, MaxKeyBytes: engine.MaxKeyBytesCeiling})
		at := time.Unix(1_700_000_000, 0)
		e.AllowAt("k", 1, at)
		e.AllowAt(big, 1, at)
		i := 0
		a := testing.AllocsPerRun(1000, func() {
			i++
			e.AllowAt("k", 1, at.Add(time.Duration(i)*time.Millisecond))
			e.AllowAt(big, 2, at.Add(time.Duration(i)*time.Millisecond))
			e.AllowN("k", 0)
			e.Allow("k")
			e.AllowAt("k", 5, at) // n > limit on an existing key
		})
		require.Zero(t, a, alg.String())
	}
}

func TestAuditUnsampledAllocs(t *testing.T) {
	e := newEngineNoCloseCheck(t, engine.Config{Limit: 1 << 30, Window: time.Second, Audit: 0.5, DisableEviction: true})
	var un, sa string
	for i := 0; un == "" || sa == ""; i++ {
		k := fmt.Sprint("key", i)
		if e.Audited(k) {
			sa = k
		} else {
			un = k
		}
	}
	e.Close() // stops the drain goroutine, whose allocations AllocsPerRun would count
	for _, k := range []string{un, sa} {
		e.AllowAt(k, 1, t0)
		if a := testing.AllocsPerRun(200, func() { e.AllowAt(k, 1, t0) }); a != 0 {
			t.Errorf("AllowAt %s allocs %v", k, a)
		}
		if a := testing.AllocsPerRun(200, func() { e.Allow(k) }); a != 0 {
			t.Errorf("Allow %s allocs %v", k, a)
		}
		if a := testing.AllocsPerRun(200, func() { r := e.ReserveAt(k, 1, t0); r.Cancel() }); a != 0 {
			t.Errorf("Reserve/Cancel %s allocs %v", k, a)
		}
		reqs := []engine.Request{{Engine: e, Key: k, N: 1}, {Engine: e, Key: k, N: 1 << 31}}
		if a := testing.AllocsPerRun(200, func() { engine.AllowAll(t0, reqs...) }); a != 0 {
			t.Errorf("AllowAll %s allocs %v", k, a)
		}
	}
}
