package engine_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

var t13 = time.Unix(1_700_000_000, 0)

func new13(t *testing.T, c engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestReview4ZeroReservation(t *testing.T) {
	var r engine.Reservation
	if r.Cancel() {
		t.Fatal("zero Cancel true")
	}
	if d := r.Decision(); d.Allowed {
		t.Fatalf("zero Decision allowed: %+v", d)
	}
	if r.Units() != 0 || r.Key() != "" || !r.At().IsZero() {
		t.Fatal("zero fields")
	}
}

// Cancel at the boundary (found by the fourth adversarial review: the doc
// said N sub-windows later, the code and design §3b say N+1): at sub-window
// e+N the sliding window still counts e's units, so Cancel returns them;
// from e+N+1 on it returns false and changes nothing.
func TestReview4CancelAtWindowEndBoundary(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict} {
		t.Run(alg.String(), func(t *testing.T) {
			for _, c := range []struct {
				later int // sub-windows after the reservation's
				want  bool
			}{{4, true}, {5, false}} {
				e := new13(t, engine.Config{Limit: 4, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg, DisableEviction: true})
				r := e.ReserveAt("k", 2, t13)
				if !r.Decision().Allowed {
					t.Fatal("denied")
				}
				at := r.At().Add(time.Duration(c.later) * time.Second)
				e.AllowAt("k", 1, at)
				before := e.AllowAt("k", 0, at).Remaining
				got := r.Cancel()
				after := e.AllowAt("k", 0, at).Remaining
				if got != c.want || (after != before) != c.want || c.want && after != before+2 {
					t.Errorf("%d sub-windows later: Cancel = %v (want %v), remaining %d -> %d", c.later, got, c.want, before, after)
				}
			}
		})
	}
}

func TestReview4ReserveBadInput(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		e := new13(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: alg, DisableEviction: true, MaxKeys: 1})
		for _, c := range []struct {
			n   int64
			now time.Time
		}{{-1, t13}, {5, t13}, {math.MaxInt64, t13}, {math.MinInt64, t13}, {1, time.Unix(-1, 0)}, {1, time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)}, {1, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}, {1, time.Time{}}} {
			r := e.ReserveAt("k", c.n, c.now)
			d := r.Decision()
			if d.Allowed || d.RetryAfter != engine.Never || d.Reason() != engine.ReasonNever {
				t.Errorf("%v n=%d now=%v: %+v", alg, c.n, c.now, d)
			}
			if r.Cancel() || r.Units() != 0 || !r.At().IsZero() {
				t.Errorf("%v: refused reservation holds units", alg)
			}
			if e.Len() != 0 {
				t.Errorf("%v n=%d: refused request created a key", alg, c.n)
			}
		}
		// peek does not create
		r := e.ReserveAt("k", 0, t13)
		if !r.Decision().Allowed || r.Cancel() || e.Len() != 0 {
			t.Errorf("%v: peek", alg)
		}
		r1 := e.ReserveAt("a", 1, t13)
		r2 := e.ReserveAt("b", 1, t13)
		if !r1.Decision().Allowed || r2.Decision().Reason() != engine.ReasonKeysFull || r2.Cancel() {
			t.Errorf("%v: keys full %+v", alg, r2.Decision())
		}
		if !r1.Cancel() || r1.Cancel() {
			t.Errorf("%v: cancel idempotence", alg)
		}
	}
}

func TestReview4AllowAllEdges(t *testing.T) {
	e := new13(t, engine.Config{Limit: 3, Window: time.Second, DisableEviction: true})
	f := new13(t, engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingLog, DisableEviction: true})
	// none
	i, d := engine.AllowAll(t13)
	if i != -1 || !d.Allowed || d != (engine.Decision{Allowed: true}) {
		t.Fatalf("empty: %d %+v", i, d)
	}
	// nil engine
	i, d = engine.AllowAll(t13, engine.Request{Engine: e, Key: "k", N: 1}, engine.Request{Key: "k", N: 1})
	if i != 1 || d.Allowed || d.RetryAfter != engine.Never {
		t.Fatalf("nil engine: %d %+v", i, d)
	}
	if r := e.AllowAt("k", 0, t13).Remaining; r != 3 {
		t.Fatalf("nil engine consumed: %d", r)
	}
	// duplicates: 2+2 > 3 on the same key -> none
	i, d = engine.AllowAll(t13, engine.Request{Engine: e, Key: "k", N: 2}, engine.Request{Engine: f, Key: "k", N: 5}, engine.Request{Engine: e, Key: "k", N: 2})
	if i != 2 || d.Allowed || d.Reason() != engine.ReasonLimited {
		t.Fatalf("dup: %d %+v", i, d)
	}
	if r := e.AllowAt("k", 0, t13).Remaining; r != 3 {
		t.Fatalf("dup consumed e: %d", r)
	}
	if r := f.AllowAt("k", 0, t13).Remaining; r != 5 {
		t.Fatalf("dup consumed f: %d", r)
	}
	// n=0 and a single request
	i, d = engine.AllowAll(t13, engine.Request{Engine: e, Key: "k", N: 0})
	if i != -1 || !d.Allowed || d.Remaining != 3 {
		t.Fatalf("n=0: %d %+v", i, d)
	}
	// least remaining, first of equals
	i, d = engine.AllowAll(t13, engine.Request{Engine: f, Key: "z", N: 4}, engine.Request{Engine: e, Key: "z", N: 2})
	if i != -1 || !d.Allowed || d.Remaining != 1 || d.Limit != 5 {
		t.Fatalf("least: %d %+v", i, d)
	}
	// before 1970
	i, d = engine.AllowAll(time.Unix(-5, 0), engine.Request{Engine: e, Key: "q", N: 1})
	if i != 0 || d.RetryAfter != engine.Never {
		t.Fatalf("1969: %d %+v", i, d)
	}
	// n too large at the end -> earlier cancelled
	i, d = engine.AllowAll(t13, engine.Request{Engine: e, Key: "y", N: 3}, engine.Request{Engine: e, Key: "y", N: -1})
	if i != 1 || d.RetryAfter != engine.Never {
		t.Fatalf("neg: %d %+v", i, d)
	}
	if r := e.AllowAt("y", 0, t13).Remaining; r != 3 {
		t.Fatalf("neg consumed: %d", r)
	}
}

func TestReview4WaitEdges(t *testing.T) {
	clk := engine.NewManualClock(t13)
	e := new13(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 2, Clock: clk, MaxKeys: 2})
	ctx := context.Background()
	if _, err := e.Wait(ctx, "k", 3); !errors.Is(err, engine.ErrNeverAdmitted) {
		t.Fatalf("n>limit: %v", err)
	}
	if _, err := e.Wait(ctx, "k", -1); !errors.Is(err, engine.ErrNeverAdmitted) {
		t.Fatalf("n<0: %v", err)
	}
	if d, err := e.Wait(ctx, "k", 0); err != nil || !d.Allowed {
		t.Fatalf("n=0: %v", err)
	}
	if e.Len() != 0 {
		t.Fatalf("Wait that recorded nothing created a key")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Wait(done, "k", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("done ctx: %v", err)
	}
	if e.AllowAt("k", 0, t13).Remaining != 2 {
		t.Fatal("done ctx recorded")
	}
	e.Allow("a")
	e.Allow("b")
	if _, err := e.Wait(ctx, "c", 1); !errors.Is(err, engine.ErrKeysFull) {
		t.Fatalf("keys full: %v", err)
	}
	// deadline before the room
	e.AllowN("a", 1)
	dctx, c2 := context.WithTimeout(ctx, 10*time.Millisecond)
	defer c2()
	if _, err := e.Wait(dctx, "a", 1); !errors.Is(err, engine.ErrWaitExceedsDeadline) {
		t.Fatalf("deadline: %v", err)
	}
	if clk.Waits() != 0 {
		t.Fatal("waits left")
	}
}

func TestReview4AllowAllFirstOfEquals(t *testing.T) {
	e := new13(t, engine.Config{Limit: 5, Window: time.Second, DisableEviction: true})
	f := new13(t, engine.Config{Limit: 7, Window: time.Second, Algorithm: engine.SlidingLog, DisableEviction: true})
	i, d := engine.AllowAll(t13, engine.Request{Engine: f, Key: "a", N: 4}, engine.Request{Engine: e, Key: "a", N: 2})
	if i != -1 || d.Limit != 7 || d.Remaining != 3 {
		t.Fatalf("first of equals: %d %+v", i, d)
	}
	i, d = engine.AllowAll(t13, engine.Request{Engine: e, Key: "b", N: 1}, engine.Request{Engine: nil, Key: "b", N: 0})
	if i != 1 || d.Reason() != engine.ReasonNever {
		t.Fatalf("nil engine n=0: %d %+v %v", i, d, d.Reason())
	}
}

func TestReview4CancelBoundariesExact(t *testing.T) {
	W := 4 * time.Second
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		at := t13.Add(1500 * time.Millisecond) // mid sub-window
		var lastTrue, firstFalse time.Time
		switch alg {
		case engine.FixedWindow:
			ws := time.Unix(0, at.UnixNano()/int64(W)*int64(W))
			firstFalse = ws.Add(W)
		case engine.SlidingLog:
			firstFalse = at.Add(W)
		default:
			firstFalse = at.Truncate(time.Second).Add(W + time.Second)
		}
		lastTrue = firstFalse.Add(-1)
		for _, c := range []struct {
			when time.Time
			want bool
		}{{lastTrue, true}, {firstFalse, false}} {
			e := new13(t, engine.Config{Limit: 4, Window: W, SubWindows: 4, Algorithm: alg, DisableEviction: true})
			r := e.ReserveAt("k", 2, at)
			e.AllowAt("k", 1, c.when)
			if got := r.Cancel(); got != c.want {
				t.Errorf("%v: request at At+%v, Cancel %v, want %v", alg, c.when.Sub(r.At()), got, c.want)
			}
		}
	}
}

// Wait: "n == 0 is admitted at once (it records nothing)" — also for a new
// key when MaxKeys keys are held? And AllowAt(n=0) there.
func TestReview4PeekAtMaxKeys(t *testing.T) {
	clk := engine.NewManualClock(t13)
	e := new13(t, engine.Config{Limit: 2, Window: time.Second, Clock: clk, MaxKeys: 1})
	e.Allow("a")
	d0 := e.AllowAt("b", 0, t13)
	r := e.ReserveAt("b", 0, t13)
	d, err := e.Wait(context.Background(), "b", 0)
	t.Logf("AllowAt n=0: %+v %v; Reserve n=0: %+v; Wait n=0: %+v %v", d0, d0.Reason(), r.Decision(), d, err)
	if err != nil || !d.Allowed {
		t.Errorf("Wait(n=0) on a new key at MaxKeys: %+v, %v; doc: n == 0 is admitted at once", d, err)
	}
}
