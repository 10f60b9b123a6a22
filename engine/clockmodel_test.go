package engine_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Allow and AllowN read the engine's clock themselves (an injected Clock,
// or the coarse clock, read inline on the decision path). Driven by a
// ManualClock that steps forward, backward by up to three windows, more
// than 2^21 sub-windows ahead (or, with MaxWindow, decades) and back, and
// outside 1970 … 2262, every Decision
// matches the exact model at the clock's reading: a reading older than a
// key's newest sub-window is decided at that sub-window's start, and an
// unrepresentable one is refused with RetryAfter Never, recording nothing.
func TestClockReadingsMatchModel(t *testing.T) {
	geos := []engine.Config{
		{Algorithm: engine.SlidingWindow, Limit: 5, Window: time.Second},
		{Algorithm: engine.SlidingWindow, Limit: 3, Window: time.Second, SubWindows: 1},
		{Algorithm: engine.SlidingWindowStrict, Limit: 4, Window: 300 * time.Millisecond, SubWindows: 3},
		{Algorithm: engine.FixedWindow, Limit: 2, Window: time.Second},
		{Algorithm: engine.SlidingWindow, Limit: engine.MaxLimit, Window: engine.MaxWindow, SubWindows: 4},
		{Algorithm: engine.SlidingWindow, Limit: 7, Window: engine.MaxWindow, SubWindows: 1},
		{Algorithm: engine.SlidingWindowStrict, Limit: 7, Window: engine.MaxWindow, SubWindows: 1},
		{Algorithm: engine.FixedWindow, Limit: engine.MaxLimit, Window: engine.MaxWindow},
		{Algorithm: engine.SlidingWindow, Limit: 3, Window: 10, SubWindows: 10},
		{Algorithm: engine.SlidingWindowStrict, Limit: 1, Window: 1000, SubWindows: 1000},
		{Algorithm: engine.FixedWindow, Limit: 1, Window: 1},
	}
	for _, g := range geos {
		for _, coarse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/n%d/L%d/coarse=%v", g.Algorithm, g.SubWindows, g.Limit, coarse), func(t *testing.T) {
				clockModel(t, g, coarse)
			})
		}
	}
}

func clockModel(t *testing.T, cfg engine.Config, coarse bool) {
	clk := engine.NewManualClock(t0)
	cfg.DisableEviction = true
	var e *engine.Engine
	refresh := func() {}
	if coarse {
		cfg.CoarseClock = time.Millisecond
		var err error
		if e, refresh, err = engine.NewDrivenCoarse(cfg, clk); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
	} else {
		cfg.Clock = clk
		e = newEngine(t, cfg)
	}
	m := newModel(e.Config())
	w, win := e.Width(), int64(e.Config().Window)
	keys := []string{"", "a", "seven77", "eight888", strings.Repeat("\xff", 15), strings.Repeat("\x00", 16), strings.Repeat("k", 71), strings.Repeat("k", 72), strings.Repeat("q", 300)}
	ns := []int64{-1, 0, 1, 2, cfg.Limit, cfg.Limit + 1, cfg.Limit / 2}
	rng := rand.New(rand.NewPCG(uint64(cfg.Limit), uint64(cfg.SubWindows)))
	now := t0.UnixNano()
	farUsed := false
	for step := range scaled(3000, 30000) {
		bad := false
		switch c := rng.IntN(40); {
		case c < 20:
			now += rng.Int64N(w/2 + 1)
		case c < 30:
			now -= rng.Int64N(3*min(win, 1<<40) + 1) // backwards
		case c < 34:
			now += w + rng.Int64N(2*w+1)
		case c == 34 && !farUsed && w < 1<<40:
			now += (1<<21 + 3) * w // every ring is retired and replaced where it is next decided
			farUsed = true
		case c == 35:
			bad = true
		}
		if now < 0 || now > 1<<62 {
			// Back to the start, decades behind every key's newest time: times
			// stay before 2116, where the waits of MaxWindow stay before 2262.
			now = t0.UnixNano() + rng.Int64N(w)
		}
		if bad {
			clk.Set(time.Unix(-1, 0)) // reads −1: before 1970
		} else {
			clk.Set(time.Unix(0, now))
		}
		refresh()
		k := keys[rng.IntN(len(keys))]
		n := ns[rng.IntN(len(ns))]
		if rng.IntN(3) == 0 {
			got := e.Allow(k)
			want := !bad && m.decide(k, 1, now).Allowed
			if got != want {
				t.Fatalf("step %d: Allow(len %d) at %d (bad clock %v) = %v, model %v", step, len(k), now, bad, got, want)
			}
			continue
		}
		got := e.AllowN(k, n)
		want := engine.Decision{Limit: cfg.Limit, RetryAfter: engine.Never}
		if !bad {
			want = m.decide(k, n, now)
		}
		if got != want {
			t.Fatalf("step %d: AllowN(len %d, %d) at %d (bad clock %v) = %+v, model %+v", step, len(k), n, now, bad, got, want)
		}
	}
}
