package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestNewKeyBehindTheClockStartsAtItsShardsFloor pins what the docs now
// say about the reclamation floor, which is per shard: a brand-new key
// decided by AllowAt more than a sub-window behind the engine's clock, in
// a shard that reclaimed another key, is decided at that key's
// retirement time (the shard's floor, never past the clock minus one
// sub-window): it gets Limit units there, and its RetryAfter counts from
// the caller's own now to the end of the floor's window. A request at the
// engine's clock is never clamped, and with eviction off there is no
// floor.
func TestNewKeyBehindTheClockStartsAtItsShardsFloor(t *testing.T) {
	const (
		W = time.Second
		w = W / 10
		L = 2
	)
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: L, Window: W, SubWindows: 10, Clock: clk, Shards: 1, SweepInterval: time.Hour})
	if !e.Allow("a") { // "a" at t0; idle from then on
		t.Fatal("a refused")
	}
	clk.Advance(41 * time.Second)
	if n := e.Sweep(); n != 1 {
		t.Fatalf("Sweep reclaimed %d keys, want 1", n)
	}
	floor := t0.Add(W + w) // a's retirement time: its newest sub-window's end plus W
	// A brand-new key, 40 s behind the clock (39.9 s behind the floor).
	at := t0.Add(time.Second)
	for i := range L {
		d, eff := e.AllowAtTrace("b", 1, at)
		if !d.Allowed || eff != floor.UnixNano()/int64(w) {
			t.Fatalf("unit %d: %+v at epoch %d, want admitted at the floor's epoch %d", i, d, eff, floor.UnixNano()/int64(w))
		}
	}
	// Room for one more once the floor's sub-window is half out of the
	// weighted window (2·(w−r)/w + 1 ≤ 2), counted from the caller's now.
	room := floor.Add(W + w/2)
	d := e.AllowAt("b", 1, at)
	if want := room.Sub(at); d.Allowed || d.RetryAfter != want {
		t.Fatalf("third unit: %+v, want refused with RetryAfter %v (from the caller's now to the room at the floor's timeline)", d, want)
	}
	if d := e.AllowAt("b", 1, room); !d.Allowed {
		t.Fatalf("at its RetryAfter: %+v, want admitted", d)
	}
	// At the engine's clock a new key is never clamped: the floor is at
	// least a sub-window behind it.
	now := time.Unix(0, clk.UnixNano())
	if _, eff := e.AllowAtTrace("c", 1, now); eff != now.UnixNano()/int64(w) {
		t.Fatalf("a new key at the clock was clamped to epoch %d, want %d", eff, now.UnixNano()/int64(w))
	}
}
