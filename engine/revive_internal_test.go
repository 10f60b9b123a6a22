package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A writer far ahead retires the ring, and before it replaces it a writer
// at the key's present time arrives. The present writer must not rebuild
// the key at its own time, dropping counts still inside its window: the
// replacement starts at the retiring epoch. Any sequential order admits at
// most 10 units after the first 10.
//
// A sweep may run between the retirement and the present writer. With the
// engine's clock before the far writer's time it must leave the ring to
// that writer's Replace (found by the stress checker: a sweeper that
// deleted it let the present writer create the key afresh at its own
// time). With the clock past it, it removes the ring, and the shard's
// floor still clamps the present writer forward.
func TestReviveRaceNeverOverAdmits(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingWindowStrict, FixedWindow} {
		for _, sweep := range []string{"none", "before", "after"} {
			t.Run(fmt.Sprint(alg, "/sweep=", sweep), func(t *testing.T) { reviveRace(t, alg, sweep) })
		}
	}
}

func reviveRace(t *testing.T, alg Algorithm, sweep string) {
	t0 := time.Unix(1_700_000_000, 0)
	clk := NewManualClock(t0)
	e, err := New(Config{Limit: 10, Window: 10 * time.Millisecond, SubWindows: 10, Algorithm: alg, Clock: clk, DisableEviction: true})
	require.NoError(t, err)
	defer e.Close()
	far := t0.Add(time.Duration(1<<22) * time.Duration(e.cfg.width)).UnixNano()
	require.True(t, e.AllowAt("k", 10, t0).Allowed)

	// The far writer's first half: its Acquire retires the ring.
	h := e.tab.Hash("k")
	old, ok := e.tab.Load(h, "k")
	require.True(t, ok)
	require.True(t, e.geo.Acquire(old, far, 1, 10).Dead)
	switch sweep {
	case "before":
		require.Zero(t, e.Sweep(), "retired at a time after the clock: the far writer's to replace")
	case "after":
		clk.Set(time.Unix(0, far).Add(time.Second))
		require.Equal(t, 1, e.Sweep(), "retired before the clock: a sweep removes it")
	}
	// The present writer runs in full.
	p := e.AllowAt("k", 10, t0.Add(5*time.Millisecond))
	// The far writer's second half, as decideSlow runs it.
	var f Decision
	for r := old; ; {
		r, ok = e.replace(h, "k", r, far)
		require.True(t, ok)
		res := e.geo.Acquire(r, far, 1, 10)
		if !res.Dead {
			f = decision(res, 10)
			break
		}
	}
	admitted := int64(0)
	if p.Allowed {
		admitted += 10
	}
	if f.Allowed {
		admitted++
	}
	require.LessOrEqual(t, admitted, int64(10), "present %+v, far %+v", p, f)
}
