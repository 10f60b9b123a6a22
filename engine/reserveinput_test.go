package engine_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// A bad time or n refuses with nothing to cancel; the zero Reservation is a
// denied one.
func TestReserveRefusals(t *testing.T) {
	e := newEngine(t, engine.Config{Limit: 3, Window: time.Second, DisableEviction: true})
	for _, c := range []struct {
		n   int64
		now time.Time
	}{{-1, t0}, {4, t0}, {1, time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)}, {1, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}} {
		r := e.ReserveAt("k", c.n, c.now)
		require.False(t, r.Decision().Allowed)
		require.Equal(t, engine.Never, r.Decision().RetryAfter)
		require.False(t, r.Cancel())
		require.Equal(t, int64(0), r.Units())
	}
	var zero engine.Reservation
	require.False(t, zero.Cancel())
	require.False(t, zero.Decision().Allowed)
	require.Equal(t, int64(0), e.Len(), "refused requests create no key")
}

// The Reservation's size, as its doc states (64-bit platforms).
func TestReservationSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("64-bit platforms only")
	}
	require.Equal(t, uintptr(112), unsafe.Sizeof(engine.Reservation{}))
}

func TestZeroReservation(t *testing.T) {
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

func TestReserveBadInput(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		e := newEngineNoCloseCheck(t, engine.Config{Limit: 4, Window: time.Second, Algorithm: alg, DisableEviction: true, MaxKeys: 1})
		for _, c := range []struct {
			n   int64
			now time.Time
		}{{-1, t0}, {5, t0}, {math.MaxInt64, t0}, {math.MinInt64, t0}, {1, time.Unix(-1, 0)}, {1, time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)}, {1, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}, {1, time.Time{}}} {
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
		r := e.ReserveAt("k", 0, t0)
		if !r.Decision().Allowed || r.Cancel() || e.Len() != 0 {
			t.Errorf("%v: peek", alg)
		}
		r1 := e.ReserveAt("a", 1, t0)
		r2 := e.ReserveAt("b", 1, t0)
		if !r1.Decision().Allowed || r2.Decision().Reason() != engine.ReasonKeysFull || r2.Cancel() {
			t.Errorf("%v: keys full %+v", alg, r2.Decision())
		}
		if !r1.Cancel() || r1.Cancel() {
			t.Errorf("%v: cancel idempotence", alg)
		}
	}
}

// Extreme times and windows: peek, reserve, cancel must restore the peek,
// never panic, and keep 0 ≤ Remaining ≤ Limit.
func TestExtremeReserveCancel(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	windows := []struct {
		W time.Duration
		N int
	}{{engine.MaxWindow, 512}, {engine.MaxWindow, 1}, {engine.MaxWindow / 4, 4}, {time.Nanosecond, 1}, {1000, 1000}, {time.Hour, 9 * 8}, {1 << 40, 1 << 9}}
	limits := []int64{1, 3, engine.MaxLimit}
	maxT := int64(math.MaxInt64)
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, wc := range windows {
			for _, L := range limits {
				if alg == engine.SlidingLog && L > 1000 {
					L = 1000
				}
				e, err := engine.New(engine.Config{Limit: L, Window: wc.W, SubWindows: wc.N, Algorithm: alg, DisableEviction: true, MaxLogLimit: 1000})
				if err != nil {
					t.Fatalf("%v %v %d: %v", alg, wc, L, err)
				}
				func() {
					defer e.Close()
					times := []int64{0, 1, maxT, maxT - 1, maxT - int64(wc.W), maxT / 2, int64(wc.W), 1 << 62}
					for i := 0; i < 400; i++ {
						var ts int64
						if rng.IntN(2) == 0 {
							ts = times[rng.IntN(len(times))] + rng.Int64N(1000) - 500
							if ts < 0 {
								ts = 0
							}
						} else {
							ts = rng.Int64N(maxT)
						}
						now := time.Unix(0, ts)
						key := fmt.Sprint("k", rng.IntN(3))
						n := 1 + rng.Int64N(min(L, 5))
						if rng.IntN(4) == 0 {
							n = L
						}
						var p0, p1 engine.Decision
						var r engine.Reservation
						var ok bool
						func() {
							defer func() {
								if x := recover(); x != nil {
									t.Fatalf("%v W=%v N=%d L=%d t=%d n=%d: panic %v", alg, wc.W, wc.N, L, ts, n, x)
								}
							}()
							p0 = e.AllowAt(key, 0, now)
							r = e.ReserveAt(key, n, now)
							ok = r.Cancel()
							p1 = e.AllowAt(key, 0, now)
						}()
						d := r.Decision()
						if d.Remaining < 0 || d.Remaining > d.Limit || p1.Remaining < 0 || p1.Remaining > p1.Limit {
							t.Fatalf("%v: remaining out of range %+v %+v", alg, d, p1)
						}
						if d.Allowed != ok {
							t.Fatalf("%v W=%v N=%d L=%d t=%d n=%d: allowed %v, immediate Cancel %v", alg, wc.W, wc.N, L, ts, n, d.Allowed, ok)
						}
						if p0.Remaining != p1.Remaining {
							t.Fatalf("%v W=%v N=%d L=%d t=%d n=%d: peek %d, after reserve+cancel %d (%+v)", alg, wc.W, wc.N, L, ts, n, p0.Remaining, p1.Remaining, d)
						}
						if rng.IntN(3) == 0 {
							e.AllowAt(key, n, now)
						}
					}
				}()
			}
		}
	}
}
