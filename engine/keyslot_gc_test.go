package engine_test

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A key that stays active in a slab the table no longer probes (its
// neighbours swept, newer and smaller slabs started) keeps that slab alive
// through collections: its count, a Reservation's Cancel into it, and a
// key string UpdateLimits showed from it stay intact while new keys
// allocate over whatever memory the collector freed.
func TestOldSlabOutlivesCollections(t *testing.T) {
	const window = time.Second
	w := window / 10
	t0 := time.Unix(1_700_000_000, 0)
	clk := engine.NewManualClock(t0)
	e, err := engine.New(engine.Config{Limit: 5, Window: window, Clock: clk, PerKeyLimits: true, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if d := e.AllowAt("held", 1, t0); !d.Allowed {
		t.Fatal(d)
	}
	for i := range 20000 { // slab generations at t0
		e.AllowAt("churn"+strconv.Itoa(i), 1, t0)
	}
	ta := t0.Add(window)
	r := e.ReserveAt("held", 3, ta)
	if !r.Decision().Allowed {
		t.Fatalf("held: %+v", r.Decision())
	}
	var shown []string
	if err := e.UpdateLimits(func(k string, _ int64) int64 {
		if k == "held" {
			shown = append(shown, k)
		}
		return 0
	}); err != nil || len(shown) != 1 {
		t.Fatalf("UpdateLimits: %v, held shown %d times", err, len(shown))
	}
	ts := ta.Add(2*w + time.Millisecond) // churn idle past W + w; held not
	clk.Set(ts)
	if got := e.Sweep(); got != 20000 {
		t.Fatalf("Sweep reclaimed %d, want the 20000 churn keys", got)
	}
	for round := range 3 {
		runtime.GC()
		junk := make([][]int64, 0, 4096) // reuse what the collector freed
		for range 4096 {
			b := make([]int64, 16)
			for j := range b {
				b[j] = -1
			}
			junk = append(junk, b)
		}
		for i := range 2000 {
			e.AllowAt("new"+strconv.Itoa(round)+"-"+strconv.Itoa(i), 1, ts)
		}
		runtime.KeepAlive(junk)
	}
	runtime.GC()
	if shown[0] != "held" {
		t.Fatalf("the key string UpdateLimits showed reads %q", shown[0])
	}
	if d := e.AllowAt("held", 0, ts); d.Remaining != 2 || d.Limit != 5 { // the unit of t0 has left the window
		t.Fatalf("held after the collections: %+v, want 2 remaining of 5", d)
	}
	if !r.Cancel() {
		t.Fatal("Cancel of held's reservation returned nothing")
	}
	if d := e.AllowAt("held", 2, ts); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("held after Cancel: %+v, want 2 units admitted and 3 remaining", d)
	}
	if !e.Reset("held") {
		t.Fatal("Reset(held) found no state")
	}
	if d := e.AllowAt("held", 0, ts); d.Remaining != 5 {
		t.Fatalf("held after Reset: %+v, want 5 remaining", d)
	}
}
