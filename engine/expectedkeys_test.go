package engine_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Config.ExpectedKeys changes where states live, never a decision: an
// engine with it and one without, driven through the same 15,000 calls
// (40,000 under -long: AllowAt with n of 0 … 2, reservations cancelled or kept, Reset,
// per-key limits, idle stretches whose sweeps reclaim most keys, and a
// table that grows to three times the expected count), answer alike, and
// hold as many keys, for every algorithm.
func TestExpectedKeysChangesNoDecision(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog, engine.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			cfg := engine.Config{Algorithm: alg, Limit: 7, Window: time.Second, Shards: 4, Clock: clk, SweepInterval: time.Hour, PerKeyLimits: alg != engine.TokenBucket}
			off := newEngine(t, cfg)
			cfg.ExpectedKeys = 1000
			on := newEngine(t, cfg)
			if got := on.Config().ExpectedKeys; got != 1000 {
				t.Fatalf("Config().ExpectedKeys = %d, want 1000", got)
			}
			keys := tableKeys(3000 - 1000)
			rng := rand.New(rand.NewPCG(uint64(alg), 29))
			now := t0
			steps := scaled(15_000, 40_000)
			for step := range steps {
				if step%(steps/5) == steps/5-1 { // an idle stretch: most keys are reclaimed
					now = now.Add(3 * time.Second)
					clk.Set(now)
					if a, b := on.Sweep(), off.Sweep(); a != b {
						t.Fatalf("step %d: Sweep reclaimed %d keys with ExpectedKeys, %d without", step, a, b)
					}
				}
				now = now.Add(time.Duration(rng.IntN(int(time.Millisecond))))
				clk.Set(now)
				k := keys[rng.IntN(len(keys))]
				n := int64(rng.IntN(3))
				sameAnswers(t, step, on, off, rng, callMix{reset: 3, setLimit: 5, reserve: 15, maxLimit: 9}, cfg.PerKeyLimits, k, n, now)
			}
			if on.Len() != off.Len() {
				t.Fatalf("Len %d with ExpectedKeys, %d without", on.Len(), off.Len())
			}
		})
	}
}

// Every ExpectedKeys that New accepts gives an engine or an error, not a
// crash: the largest, MaxExpectedKeys, with the largest slot a slab holds
// (512 B: 50 sub-windows with per-key limits), documented as a slab of
// 16 GiB at most, is built in a child process (a runtime out-of-memory is
// fatal, not a panic), which must exit normally.
func TestExpectedKeysMaxBuilds(t *testing.T) {
	const child = "RINGLIMIT_TEST_EXPECTEDKEYS_MAX"
	if os.Getenv(child) != "" {
		e, err := engine.New(engine.Config{Limit: 10, Window: time.Second, SubWindows: 50, PerKeyLimits: true, ExpectedKeys: engine.MaxExpectedKeys})
		if err != nil {
			fmt.Printf("New: %v\n", err) // refusing is an answer; crashing is not
			return
		}
		defer e.Close()
		if !e.Allow("k") {
			t.Fatal("the first request of a new key was denied")
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExpectedKeysMaxBuilds$", "-test.count=1")
	cmd.Env = append(os.Environ(), child+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.SplitN(string(out), "\n", 4)
		t.Fatalf("New(Config{SubWindows: 50, PerKeyLimits: true, ExpectedKeys: MaxExpectedKeys}) in a child process: %v; its output begins:\n%s", err, strings.Join(lines[:min(len(lines), 3)], "\n"))
	}
}

// On a 32-bit platform too, an ExpectedKeys that validation accepts
// gives an engine or an error naming the field, never a panic (the
// slab of MaxExpectedKeys, 2^26 slots of 128 B, is more than the
// address space).
func TestExpectedKeysAcceptedNeverPanics(t *testing.T) {
	if strconv.IntSize != 32 {
		t.Skip("the sizes that overflow are only reachable on 32-bit platforms without gigabytes of allocation")
	}
	for _, n := range []int64{engine.MaxExpectedKeys} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("New(Config{ExpectedKeys: %d}) panicked: %v", n, p)
				}
			}()
			e, err := engine.New(engine.Config{Limit: 10, Window: time.Second, ExpectedKeys: n})
			if err != nil {
				if !strings.Contains(err.Error(), "Config.ExpectedKeys") {
					t.Errorf("New(Config{ExpectedKeys: %d}) = %v, want an error naming Config.ExpectedKeys", n, err)
				}
				return
			}
			e.Close()
		}()
	}
}

// callMix is the shares of sameAnswers' calls, out of 100: Reset below
// reset, SetLimitAt (of 1 … maxLimit) below setLimit when the engines
// have per-key limits, ReserveAt below reserve, AllowAt above.
type callMix struct{ reset, setLimit, reserve, maxLimit int }

// sameAnswers makes one call drawn from mix on key k at at (n units),
// on the engine with ExpectedKeys and on the one without, cancels half
// the reservations on both, and fails the test at the first answer that
// differs.
func sameAnswers(t *testing.T, step int, on, off *engine.Engine, rng *rand.Rand, mix callMix, perKey bool, k string, n int64, at time.Time) {
	t.Helper()
	switch op := rng.IntN(100); {
	case op < mix.reset:
		if a, b := on.Reset(k), off.Reset(k); a != b {
			t.Fatalf("step %d: Reset(%q) = %v with ExpectedKeys, %v without", step, k, a, b)
		}
	case op < mix.setLimit && perKey:
		l := int64(1 + rng.IntN(mix.maxLimit))
		a, b := on.SetLimitAt(k, l, at), off.SetLimitAt(k, l, at)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("step %d: SetLimitAt(%q, %d) = %v with ExpectedKeys, %v without", step, k, l, a, b)
		}
	case op < mix.reserve:
		ra, rb := on.ReserveAt(k, n, at), off.ReserveAt(k, n, at)
		if ra.Decision() != rb.Decision() {
			t.Fatalf("step %d: ReserveAt(%q, %d) = %+v with ExpectedKeys, %+v without", step, k, n, ra.Decision(), rb.Decision())
		}
		if rng.IntN(2) == 0 {
			if a, b := ra.Cancel(), rb.Cancel(); a != b {
				t.Fatalf("step %d: Cancel of %q = %v with ExpectedKeys, %v without", step, k, a, b)
			}
		}
	default:
		if a, b := on.AllowAt(k, n, at), off.AllowAt(k, n, at); a != b {
			t.Fatalf("step %d: AllowAt(%q, %d, %v) = %+v with ExpectedKeys, %+v without", step, k, n, at, a, b)
		}
	}
}
