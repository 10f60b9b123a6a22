package engine

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every key's hash is forced to one value (shard.Table.ForceHashMask), so
// one key is the primary map's resident and the others live in the
// fallback map. Writers on all keys race with two sweep loops and the
// background sweeper, cycle after cycle: at each cycle's time every key
// from the cycle before is idle and reclaimable, so reclamation and
// revival race with the writers. Each key has its own limit (KeyLimit).
// In every cycle each key must admit exactly its own limit: more is an
// over-admission, less means two keys shared a count (or a count survived
// its reclamation).
func TestForcedHashCollisionsNeverShareACount(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingWindowStrict, FixedWindow, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) { forcedCollisions(t, alg) })
	}
}

func forcedCollisions(t *testing.T, alg Algorithm) {
	const (
		keys    = 12
		workers = 6
		cycles  = 12
		window  = 100 * time.Millisecond
	)
	limitOf := func(i int) int64 { return 3 + int64(i%4) }
	keyName := func(i int) string { return "tenant-" + strconv.Itoa(i) }
	t0 := time.Unix(1_700_000_000, 0)
	clk := NewManualClock(t0)
	e, err := New(Config{
		Limit: 3, Window: window, SubWindows: 10, Algorithm: alg, Clock: clk,
		SweepInterval: time.Millisecond,
		KeyLimit: func(k string) int64 {
			i, _ := strconv.Atoi(k[len("tenant-"):])
			return limitOf(i)
		},
	})
	require.NoError(t, err)
	defer e.Close()
	e.tab.ForceHashMask(0)
	require.Equal(t, e.tab.Hash("a"), e.tab.Hash("b"))

	step := 3*window + 10*time.Millisecond // every key idle past Window + 2w (Fixed: 3W)
	for c := range cycles {
		at := t0.Add(time.Duration(c) * step)
		clk.Set(at)
		var admitted [keys]atomic.Int64
		var stop atomic.Bool
		var sweeps sync.WaitGroup
		for range 2 {
			sweeps.Add(1)
			go func() {
				defer sweeps.Done()
				for !stop.Load() {
					e.Sweep()
				}
			}()
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 40 * keys {
					i := (j + w) % keys
					if e.AllowAt(keyName(i), 1, at.Add(time.Duration(w)*time.Microsecond)).Allowed {
						admitted[i].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		stop.Store(true)
		sweeps.Wait()
		for i := range keys {
			require.Equal(t, limitOf(i), admitted[i].Load(), "cycle %d, %s: admitted %d, its limit is %d", c, keyName(i), admitted[i].Load(), limitOf(i))
		}
		require.Equal(t, int64(keys), e.Len(), "cycle %d", c)
	}
	// SetLimit on a colliding key changes that key alone.
	at := t0.Add(time.Duration(cycles) * step)
	clk.Set(at)
	require.NoError(t, e.SetLimitAt(keyName(1), 9, at))
	for i := range keys {
		want := limitOf(i)
		if i == 1 {
			want = 9
		}
		got := int64(0)
		for e.AllowAt(keyName(i), 1, at).Allowed {
			got++
		}
		require.Equal(t, want, got, fmt.Sprintf("%s after SetLimit on %s", keyName(i), keyName(1)))
	}
}
