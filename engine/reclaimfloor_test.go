package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// The docs (semantics.md, "Idle keys"; AllowAt) promise that only a new
// key decided more than a sub-window behind the engine's clock may be
// decided at another key's reclamation time in its shard, and
// TestNewKeyBehindTheClockStartsAtItsShardsFloor says why: the floor is
// never past the clock minus one sub-window. A ring that a far writer
// retired at its own sub-window, and that stays in the table because
// KeyLimit refused the key's new state there, is removed by the first
// sweep whose clock has reached that sub-window's start: the shard's floor
// is then the start of the clock's own sub-window. A new key decided less
// than a sub-window behind the clock, in the sub-window before, is then
// decided at the floor: its units are counted one sub-window late, and a
// request one window after them is refused that the model admits.
func TestNewKeyJustBehindTheClockIsDecidedAtItsOwnTime(t *testing.T) {
	const (
		W = time.Second
		w = W / 10
		L = 2
	)
	refuse := false
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: L, Window: W, SubWindows: 10, Algorithm: engine.SlidingWindowStrict,
		Clock: clk, Shards: 1, SweepInterval: time.Hour,
		KeyLimit: func(k string) int64 {
			if refuse && k == "far" {
				return -1 // the tenant was removed from the policy
			}
			return 0
		}})
	if d := e.AllowAt("far", 1, t0); !d.Allowed {
		t.Fatalf("far refused: %+v", d)
	}
	// 2^21 sub-windows and a half later: the ring is retired at that
	// sub-window and, KeyLimit refusing the key now, left in the table.
	far := t0.Add((1<<21)*w + w/2)
	refuse = true
	if d := e.AllowAt("far", 1, far); d.RetryAfter != engine.Never {
		t.Fatalf("far, refused by KeyLimit: %+v, want RetryAfter Never", d)
	}
	// The clock reaches that sub-window: the ring stays until the clock
	// leaves it, and then a sweep removes it.
	for i, c := range []struct {
		clock time.Time
		swept int
	}{{far.Add(w / 4), 0}, {far.Add(w + w/4), 1}} {
		clk.Set(c.clock)
		if n := e.Sweep(); n != c.swept {
			t.Fatalf("clock %v after the far ring's sub-window: Sweep reclaimed %d keys, want %d",
				c.clock.Sub(far.Truncate(w)), n, c.swept)
		}
		at := c.clock.Add(-3 * w / 4).Add(-time.Millisecond) // 0.76 sub-windows behind the clock, in the sub-window before
		key := fmt.Sprint("new", i)
		r := e.ReserveAt(key, L, at)
		if !r.Decision().Allowed {
			t.Fatalf("a new key refused its limit: %+v", r.Decision())
		}
		if want := at.Truncate(w); !r.At().Equal(want) {
			t.Errorf("a new key %v behind the clock was counted at %v, %v after its own sub-window's start %v",
				c.clock.Sub(at), r.At().Format(time.RFC3339Nano), r.At().Sub(want), want.Format(time.RFC3339Nano))
		}
		// Strict: its units leave the window N+1 sub-windows after their own.
		next := at.Truncate(w).Add(W + w)
		if d := e.AllowAt(key, 1, next); !d.Allowed {
			t.Errorf("one window and a sub-window after its units, the key is refused: %+v", d)
		}
	}
}
