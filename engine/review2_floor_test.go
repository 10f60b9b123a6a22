package engine_test

// Adversarial review 2: the shard floor.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// ADV2-1. The design says "the floor never passes the engine's clock, so a
// writer on the engine's clock is clamped forward by at most its own delay".
// But a KeyLimit refusal after a revive (engine.replace → Table.Remove)
// raises the shard's floor to the reviving writer's own time, which is the
// caller's AllowAt time: any time up to 2262. Every key the shard creates
// afterwards — other tenants' keys on the engine's clock — starts there:
// all their requests clamp to that one far sub-window, so each gets Limit
// units in total until the clock reaches it, and the sweeper never finds
// them idle (their newest epoch is ahead of its clock), so they are never
// reclaimed.
//
// The key the refusal hits exists legitimately: SetLimit creates a key
// without consulting KeyLimit (here: an operator grants "vip" a limit,
// although KeyLimit refuses unknown tenants); a KeyLimit that flips (a
// tenant removed from the policy) does the same.
func TestAdv2RefusedReviveRaisesShardFloorIntoTheFuture(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0)
			clk := engine.NewManualClock(t0)
			const L = 3
			e := newEngine(t, engine.Config{
				Limit: L, Window: time.Second, SubWindows: 10, Algorithm: alg, Clock: clk,
				Shards: 1, SweepInterval: time.Hour,
				KeyLimit: func(k string) int64 {
					if k == "vip" {
						return -1 // not in the policy
					}
					return 0
				},
			})
			require.NoError(t, e.SetLimit("vip", 10)) // an operator's override
			w := time.Second / 10
			if alg == engine.FixedWindow {
				w = time.Second
			}
			// One request with a far time (a client-supplied timestamp, a
			// replay): ≥ 2^21 sub-windows past the key's newest.
			far := t0.Add(w * (1 << 24))
			d := e.AllowAt("vip", 1, far)
			require.Equal(t, engine.Never, d.RetryAfter)

			// Another tenant, on the engine's own clock, in the same shard.
			d, eff := e.AllowAtTrace("other", 1, time.Unix(0, clk.UnixNano()))
			require.True(t, d.Allowed)
			clockEpoch := time.Unix(0, clk.UnixNano()).UnixNano() / int64(w)
			assert.LessOrEqual(t, eff, clockEpoch+1,
				"a new key on the engine's clock starts %d sub-windows in the future (floor beyond the clock)", eff-clockEpoch)
			for i := 1; i < L; i++ {
				require.True(t, e.Allow("other"))
			}
			// Three windows later the tenant must have a fresh window.
			clk.Advance(3 * time.Second)
			d = e.AllowN("other", 1)
			assert.True(t, d.Allowed, "3 windows after its last request, \"other\" is still refused: %+v (%v)", d, d.Reason())
			// And once idle for an hour it must be reclaimed.
			clk.Advance(time.Hour)
			assert.Equal(t, 1, e.Sweep(), "an hour-idle key is not reclaimed")
		})
	}
}

// Held-check for the same mechanism on the sweeper side: a sweep at the
// engine's clock only lifts the floor to that clock.
func TestAdv2SweepFloorStaysAtClock(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 3, Window: time.Second, SubWindows: 10, Clock: clk, Shards: 1, SweepInterval: time.Hour})
	require.True(t, e.Allow("a"))
	clk.Advance(2 * time.Second)
	require.Equal(t, 1, e.Sweep())
	_, eff := e.AllowAtTrace("b", 1, time.Unix(0, clk.UnixNano()))
	require.Equal(t, time.Unix(0, clk.UnixNano()).UnixNano()/int64(100*time.Millisecond), eff)
}

var _ = atomic.Int64{}

// ADV2-3. A replay on a past timeline with DisableEviction (as Config
// documents for "a timeline unrelated to Clock"), calling Sweep to get
// memory back ("Sweep is for … engines with DisableEviction"): the sweep
// judges idleness by the Clock (documented), but it also lifts the shard's
// floor to the Clock's now, and from then on every key the shard creates —
// by AllowAt or by SetLimitAt at a replay time — starts at the Clock's
// now, years ahead of the replay. Every later replay request of that key is
// clamped to one sub-window: each key gets Limit units for the rest of the
// replay. Nothing documents that a Sweep freezes new keys of the timeline.
func TestAdv2SweepOnReplayTimelineFreezesNewKeys(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(1_800_000_000, 0)) // "real" now
	const L = 2
	e := newEngine(t, engine.Config{Limit: L, Window: time.Second, SubWindows: 10, Clock: clk, DisableEviction: true, Shards: 1, PerKeyLimits: true})
	replay := time.Unix(1_600_000_000, 0)
	require.True(t, e.AllowAt("old", 1, replay).Allowed)
	require.Equal(t, 1, e.Sweep()) // memory back: "old" is idle by the Clock (documented)

	// The replay goes on, 10 s later, with a new key.
	at := replay.Add(10 * time.Second)
	admitted := 0
	for i := 0; i < 100; i++ { // 100 requests, 1 s apart: 100 windows
		if e.AllowAt("new", 1, at.Add(time.Duration(i)*time.Second)).Allowed {
			admitted++
		}
	}
	require.NoError(t, e.SetLimitAt("new2", 5, at))
	_, eff := e.AllowAtTrace("new2", 1, at)
	assert.Equal(t, at.UnixNano()/int64(100*time.Millisecond), eff, "SetLimitAt at a replay time created the key at the Clock's now")
	assert.Equal(t, 100, admitted, "one request per window over 100 windows with Limit %d: only %d admitted", L, admitted)
}
