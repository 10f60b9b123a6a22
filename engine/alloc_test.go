package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
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
