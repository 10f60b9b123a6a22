package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// heldTimes is a go-redis hook that keeps the Redis time of the last
// reply of heldScript (its fourth element), so that a test can drive the
// engine at the instant Redis decided.
type heldTimes struct{ last atomic.Int64 } // µs

func watchHeld(c *redis.Client) *heldTimes {
	h := &heldTimes{}
	c.AddHook(h)
	return h
}

func (h *heldTimes) at() time.Time                               { return time.UnixMicro(h.last.Load()) }
func (h *heldTimes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *heldTimes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *heldTimes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok {
			if a, ok := c.Val().([]any); ok && len(a) == 5 {
				if t, ok := a[3].(int64); ok {
					h.last.Store(t)
				}
			}
		}
		return err
	}
}

// A random run of Reserve, Cancel, Settle (fewer, equal, more units) and
// ChargeN, with copies, matches the engine driven at the Redis time of
// each call: every Decision, every error's kind, and every Cancel's report
// (but one case: a sub-window Redis TIME has moved out of the window,
// which Redis refuses and the engine, judging by the key's newest time,
// may cancel in a ring that no longer counts it).
func TestReserveMatchesEngine(t *testing.T) {
	s := redistest.Start(t)
	for _, tc := range []struct {
		alg engine.Algorithm
		n   int
	}{{engine.SlidingWindowStrict, 4}, {engine.SlidingWindow, 4}, {engine.FixedWindow, 0}, {engine.SlidingWindowStrict, 1}} {
		t.Run(fmt.Sprintf("%v/N=%d", tc.alg, tc.n), func(t *testing.T) {
			t.Parallel()
			c := client(t, s)
			times := watchHeld(c)
			cfg := engine.Config{Limit: 10, Window: 80 * time.Millisecond * time.Duration(max(1, tc.n)), SubWindows: tc.n, Algorithm: tc.alg}
			l := mustNew(t, c, cfg, WithPrefix(fmt.Sprintf("held:%v:%d:", tc.alg, tc.n)))
			ref := engineRef(t, cfg)
			w := l.width / 1000 // µs
			rng := rand.New(rand.NewPCG(uint64(tc.alg), uint64(tc.n)))
			type pair struct {
				r Reservation
				e engine.Reservation
			}
			var held []pair
			keys := []string{"a", "b{c}"}
			var cancelled, settledLess, settledMore, charged, debts int
			for i := range 500 {
				key := keys[rng.IntN(len(keys))]
				switch op := rng.IntN(10); {
				case op < 4 || len(held) == 0: // reserve
					n := int64(rng.IntN(5))
					r, err := l.Reserve(ctx, key, n)
					if err != nil {
						t.Fatal(err)
					}
					e := ref.ReserveAt(key, n, times.at())
					if r.Decision() != e.Decision() || r.Units() != e.Units() {
						t.Fatalf("step %d: Reserve(%q, %d) at %v: redis %+v (%d units), engine %+v (%d units)", i, key, n, times.at(), r.Decision(), r.Units(), e.Decision(), e.Units())
					}
					if r.Units() > 0 {
						if got, want := r.At(), e.At(); !got.Equal(want) {
							t.Fatalf("step %d: At %v, engine %v", i, got, want)
						}
						held = append(held, pair{r, e})
					}
				case op < 6: // cancel, maybe on a copy, maybe twice
					k := rng.IntN(len(held))
					p := held[k]
					if rng.IntN(3) == 0 {
						held = append(held[:k], held[k+1:]...)
					}
					got, err := p.r.Cancel(ctx)
					if err != nil {
						t.Fatal(err)
					}
					want := p.e.Cancel()
					gone := p.r.epoch < times.at().UnixMicro()/w-int64(tc.n) // left the window by TIME
					if got != want && !(gone && !got) {
						t.Fatalf("step %d: Cancel of %d units at %v (reserved at %v): redis %v, engine %v", i, p.r.Units(), times.at(), p.r.At(), got, want)
					}
					if got {
						cancelled++
					}
				case op < 9: // settle
					k := rng.IntN(len(held))
					p := held[k]
					held = append(held[:k], held[k+1:]...)
					actual := int64(rng.IntN(int(2*p.r.Units() + 2)))
					if rng.IntN(8) == 0 {
						actual = p.r.Units() + cfg.Limit*3 // a debt past the limit
						debts++
					}
					got, err := p.r.Settle(ctx, actual)
					want, werr := p.e.SettleAt(actual, times.at())
					if (err == nil) != (werr == nil) || errors.Is(err, engine.ErrSettled) != errors.Is(werr, engine.ErrSettled) {
						t.Fatalf("step %d: Settle(%d) of %d units: redis %v, engine %v", i, actual, p.r.Units(), err, werr)
					}
					if err == nil && got != want {
						t.Fatalf("step %d: Settle(%d) of %d units at %v: redis %+v, engine %+v", i, actual, p.r.Units(), times.at(), got, want)
					}
					if actual < p.r.Units() {
						settledLess++
					} else if actual > p.r.Units() {
						settledMore++
					}
				default: // charge
					n := int64(rng.IntN(8))
					got, err := l.ChargeN(ctx, key, n)
					if err != nil {
						t.Fatal(err)
					}
					want, werr := ref.ChargeAt(key, n, times.at())
					if werr != nil || got != want {
						t.Fatalf("step %d: ChargeN(%q, %d) at %v: redis %+v, engine %+v %v", i, key, n, times.at(), got, want, werr)
					}
					charged++
				}
				if rng.IntN(25) == 0 {
					time.Sleep(time.Duration(rng.Int64N(int64(cfg.Window) * 3 / 2)))
				}
			}
			t.Logf("cancelled %d, settled to fewer %d, to more %d (debts past the limit %d), charged %d", cancelled, settledLess, settledMore, debts, charged)
			if cancelled == 0 || settledLess == 0 || settledMore == 0 || charged == 0 {
				t.Fatal("the run did not exercise every operation")
			}
		})
	}
}

// A Reservation settles or cancels once, across copies: a second Cancel
// and a Cancel after Settle report false, a Settle after either is
// ErrSettled, and Redis holds the units the first call left.
func TestReserveOnceAcrossCopies(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	r, err := l.Reserve(ctx, "k", 4)
	if err != nil || !r.Decision().Allowed || r.Units() != 4 {
		t.Fatalf("Reserve: %+v %v", r, err)
	}
	cp := r
	if _, err := cp.Settle(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := storedUnits(t, c, l, "k"); got != 1 {
		t.Fatalf("after Settle(1) of 4: Redis holds %d units, want 1", got)
	}
	if ok, err := r.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel after a copy's Settle: %v %v, want false, nil", ok, err)
	}
	if _, err := r.Settle(ctx, 0); !errors.Is(err, engine.ErrSettled) {
		t.Fatalf("a second Settle: %v, want ErrSettled", err)
	}
	if got := storedUnits(t, c, l, "k"); got != 1 {
		t.Fatalf("after the refused calls: Redis holds %d units, want 1", got)
	}
	var zero Reservation
	if _, err := zero.Settle(ctx, 1); !errors.Is(err, engine.ErrNotReserved) {
		t.Fatalf("Settle on the zero Reservation: %v, want ErrNotReserved", err)
	}
	if ok, err := zero.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel on the zero Reservation: %v %v", ok, err)
	}
	d, err := l.Reserve(ctx, "k", 20) // above the limit: refused at once, nothing to settle
	if err != nil || d.Decision().Allowed || d.Units() != 0 {
		t.Fatalf("Reserve above the limit: %+v %v", d, err)
	}
	if _, err := d.Settle(ctx, 3); !errors.Is(err, engine.ErrNotReserved) {
		t.Fatalf("Settle of a refusal: %v, want ErrNotReserved", err)
	}
}

// A cancel whose sub-window has left the window changes nothing, though
// the key's state still holds the sub-window's count (no later write
// moved it): the units no longer count, and another reservation's units,
// recorded later in the same slot position, are never touched.
func TestCancelAfterSubWindowLeft(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const sub = 40 * time.Millisecond
	l := mustNew(t, c, engine.Config{Limit: 10, Window: 4 * sub, SubWindows: 4, Algorithm: engine.SlidingWindowStrict})
	r, err := l.Reserve(ctx, "k", 3)
	if err != nil || r.Units() != 3 {
		t.Fatal(r, err)
	}
	// The window at sub-window x+4 still counts x; x+5's does not.
	time.Sleep(time.Until(r.At().Add(5 * sub)))
	if ok, err := r.Cancel(ctx); ok || err != nil {
		t.Fatalf("Cancel after the sub-window left: %v %v, want false", ok, err)
	}
	if got := storedUnits(t, c, l, "k"); got != 3 {
		t.Fatalf("the state's count of the old sub-window: %d, want 3 (untouched)", got)
	}
	// A Settle to more still charges the debt at now.
	r2, _ := l.Reserve(ctx, "k", 2)
	time.Sleep(time.Until(r2.At().Add(5 * sub)))
	d, err := r2.Settle(ctx, 12)
	if err != nil || d.Allowed || d.Remaining != 0 {
		t.Fatalf("Settle(12) of 2 after the sub-window left: %+v %v, want the debt of 10 to refuse", d, err)
	}
}

// ChargeN refuses a debt the current sub-window cannot count
// (ErrDebtFull), charges nothing then, and refuses bad input by name.
func TestChargeBounds(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.ChargeN(ctx, "k", engine.MaxLimit); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ChargeN(ctx, "k", 1); !errors.Is(err, engine.ErrDebtFull) {
		t.Fatalf("a charge past MaxLimit in one sub-window: %v, want ErrDebtFull", err)
	}
	if got := storedUnits(t, c, l, "k"); got != engine.MaxLimit {
		t.Fatalf("stored %d, want MaxLimit", got)
	}
	r, _ := l.Reserve(ctx, "j", 1)
	if _, err := l.ChargeN(ctx, "j", engine.MaxLimit-1); err != nil { // with the reserved unit: MaxLimit
		t.Fatal(err)
	}
	if _, err := r.Settle(ctx, 2); !errors.Is(err, engine.ErrDebtFull) {
		t.Fatalf("a settle past MaxLimit: %v, want ErrDebtFull", err)
	}
	for _, n := range []int64{-1, engine.MaxLimit + 1} {
		if _, err := l.ChargeN(ctx, "k", n); err == nil {
			t.Errorf("ChargeN(%d): no error", n)
		}
	}
	if _, err := r.Settle(ctx, -1); err == nil {
		t.Error("Settle(-1): no error")
	}
	weighted := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute, Algorithm: engine.SlidingWindow})
	if _, err := weighted.ChargeN(ctx, "w", weighted.maxLimit+1); !errors.Is(err, engine.ErrDebtFull) {
		t.Fatalf("SlidingWindow: a charge past the exactness bound %d: %v, want ErrDebtFull", weighted.maxLimit, err)
	}
}
