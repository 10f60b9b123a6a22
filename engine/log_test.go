package engine_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

func TestAlgorithmNames(t *testing.T) {
	for _, alg := range allAlgorithms {
		got, err := engine.ParseAlgorithm(alg.String())
		require.NoError(t, err)
		require.Equal(t, alg, got)
	}
	require.Equal(t, "log", engine.SlidingLog.String())
	_, err := engine.ParseAlgorithm("logs")
	require.ErrorContains(t, err, "want sliding, strict, fixed, log or token")
}

// Per-key limits above the log's cap are refused the way any out-of-range
// limit is: a KeyLimit result refuses the request and creates nothing, and
// SetLimit returns an error naming the cap.
func TestLogRefusesLimitsAboveTheCap(t *testing.T) {
	e := newEngine(t, engine.Config{
		Limit: 10, Window: time.Second, Algorithm: engine.SlidingLog, MaxLogLimit: 1000, DisableEviction: true,
		KeyLimit: func(key string) int64 {
			if key == "huge" {
				return 1001
			}
			return 0
		},
	})
	d := e.AllowAt("huge", 1, t0)
	require.Equal(t, engine.Decision{Limit: 10, RetryAfter: engine.Never}, d)
	require.Equal(t, engine.ReasonNever, d.Reason())
	require.Zero(t, e.Len())

	err := e.SetLimit("k", 1001)
	require.ErrorContains(t, err, "SetLimit limit = 1001 is too large for SlidingLog, want 1 … 1000")
	require.ErrorContains(t, err, "raise Config.MaxLogLimit, up to 1048576")
	require.ErrorContains(t, e.SetLimit("k", 0), "SetLimit limit = 0, want 1 … 1000")
	require.Zero(t, e.Len(), "a refused SetLimit creates nothing")
	require.NoError(t, e.SetLimit("k", 1000))
	require.Equal(t, int64(1000), fillAt(e, "k", t0))
}

// A key's log is allocated for the limit it is created with. SetLimit above
// that moves the log into a larger one and keeps every unit, its times and
// the key's newest time; below it, the log stays and the units stay.
func TestLogSetLimitKeepsTheLog(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 3, Window: time.Second, Algorithm: engine.SlidingLog, PerKeyLimits: true, Clock: clk, DisableEviction: true})
	require.True(t, e.AllowAt("k", 2, t0).Allowed)
	require.True(t, e.AllowAt("k", 1, t0.Add(100*ms)).Allowed)
	require.NoError(t, e.SetLimit("k", 5))
	require.Equal(t, engine.Decision{Allowed: true, Limit: 5, Remaining: 2}, e.AllowAt("k", 0, t0.Add(100*ms)))
	require.True(t, e.AllowAt("k", 2, t0.Add(100*ms)).Allowed)
	// Full; the oldest unit still leaves at t0+1s, and an older time is
	// still clamped to t0+100ms: its wait counts from its own now, t0.
	require.Equal(t, engine.Decision{Limit: 5, RetryAfter: 1000 * ms}, e.AllowAt("k", 1, t0))
	require.Equal(t, engine.Decision{Limit: 5, RetryAfter: 1000 * ms}, e.AllowAt("k", 3, t0.Add(100*ms)))
	require.Equal(t, engine.Stats{Keys: 1}, e.Stats(), "growing a log is not an eviction")

	// A lower limit: the 5 units stay, and 4 of them must leave for 1 more.
	require.NoError(t, e.SetLimit("k", 2))
	require.Equal(t, engine.Decision{Limit: 2, RetryAfter: 1000 * ms}, e.AllowAt("k", 1, t0.Add(100*ms)))
	// Raising it again within the allocation needs no move.
	require.NoError(t, e.SetLimit("k", 4))
	require.Equal(t, int64(1), fillAt(e, "k", t0.Add(time.Second)), "t0's 2 left at t0+1s; the 3 at t0+100ms remain")

	// SetLimit on a new key allocates for that limit.
	require.NoError(t, e.SetLimit("new", 7))
	require.Equal(t, int64(7), fillAt(e, "new", t0))
}

// SetLimit grows a key's log while writers fill it at one instant: no unit
// is lost in a move (the final fill would then exceed the limit) and none
// is admitted beyond the limit in force.
func TestLogGrowRacingWriters(t *testing.T) {
	for round := 0; round < 50; round++ {
		clk := engine.NewManualClock(t0)
		e := newEngine(t, engine.Config{Limit: 50, Window: time.Second, Algorithm: engine.SlidingLog, PerKeyLimits: true, Clock: clk, DisableEviction: true})
		key := fmt.Sprint("k", round)
		var admitted atomic.Int64
		burst(t, func(g int) error {
			if g == 0 {
				for l := int64(60); l <= 1000; l += 10 {
					if err := e.SetLimit(key, l); err != nil {
						return err
					}
				}
				return nil
			}
			for i := 0; i < 200; i++ {
				d := e.AllowAt(key, 1, t0)
				if d.Allowed {
					admitted.Add(1)
				} else if d.Reason() != engine.ReasonLimited || d.RetryAfter != time.Second {
					return fmt.Errorf("unexpected denial %+v", d)
				}
			}
			return nil
		})
		total := admitted.Load() + fillAt(e, key, t0)
		require.Equal(t, int64(1000), total, "round %d: the log must hold exactly the final limit", round)
		require.Zero(t, e.Stats().Evicted)
	}
}

// A log key is reclaimed once its newest request is more than Window old:
// every unit is then outside the window. MaxKeys' hint is that Window.
func TestLogSweepReclaimsIdleKeys(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 5, Window: time.Second, Algorithm: engine.SlidingLog, Clock: clk, SweepInterval: time.Hour, MaxKeys: 100})
	for i := 0; i < 100; i++ {
		require.True(t, e.AllowN(fmt.Sprint(i), 1).Allowed)
	}
	d := e.AllowN("one too many", 1)
	require.Equal(t, engine.Decision{Limit: 5, Remaining: 5, RetryAfter: time.Second}, d)
	require.Equal(t, engine.ReasonKeysFull, d.Reason())

	clk.Advance(time.Second - 1) // t0's units are inside for one more nanosecond
	require.Zero(t, e.Sweep())
	e.AllowN("7", 1) // keeps key 7 alive
	clk.Advance(1)
	require.Zero(t, e.Sweep(), "idle for exactly Window: kept")
	clk.Advance(1)
	require.Equal(t, 99, e.Sweep())
	require.Equal(t, engine.Stats{Keys: 1, Evicted: 99, Refused: 1}, e.Stats())
	require.Equal(t, int64(4), e.AllowN("7", 0).Remaining) // only the unit at t0+1s−1ns is inside
	// A reclaimed key starts fresh.
	require.Equal(t, int64(5), fillAt(e, "3", time.Unix(0, clk.UnixNano())))
}
