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
			if a, ok := c.Val().([]any); ok && len(a) == 6 {
				if t, ok := a[3].(int64); ok {
					h.last.Store(t)
				}
			}
		}
		return err
	}
}

// heldModel runs each operation on a Limiter and on the reference engine
// (engineRef) at the Redis time the script used, and compares: every
// Decision, every error's kind, and every Cancel's report, but one case:
// a sub-window Redis TIME has moved out of the window, which Redis
// refuses and the engine, judging by the key's newest time, may cancel in
// a ring that no longer counts it.
type heldModel struct {
	tb    testing.TB
	l     *Limiter
	ref   *engine.Engine
	times *heldTimes
	span  int64
	held  []heldPair
	// what ran: for a test to check that a run exercised every operation
	cancelled, settledLess, settledMore, charged, debts, resets int
}

type heldPair struct {
	r Reservation
	e engine.Reservation
}

func newHeldModel(tb testing.TB, s *redistest.Server, cfg engine.Config, prefix string) *heldModel {
	c := client(tb, s)
	times := watchHeld(c)
	l, err := New(c, cfg, WithPrefix(prefix))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return &heldModel{tb: tb, l: l, ref: engineRef(tb, cfg), times: times, span: int64(l.span)}
}

func (m *heldModel) reserve(step int, key string, n int64) {
	r, err := m.l.Reserve(ctx, key, n)
	if err != nil {
		m.tb.Fatal(err)
	}
	e := m.ref.ReserveAt(key, n, m.times.at())
	if r.Decision() != e.Decision() || r.Units() != e.Units() {
		m.tb.Fatalf("step %d: Reserve(%q, %d) at %v: redis %+v (%d units), engine %+v (%d units)", step, key, n, m.times.at(), r.Decision(), r.Units(), e.Decision(), e.Units())
	}
	if r.Units() > 0 {
		if got, want := r.At(), e.At(); !got.Equal(want) {
			m.tb.Fatalf("step %d: At %v, engine %v", step, got, want)
		}
		m.held = append(m.held, heldPair{r, e})
	}
}

// cancel cancels held[k] (a copy of it), and forgets it when forget is
// set: else it may be cancelled or settled again, which must do nothing.
func (m *heldModel) cancel(step, k int, forget bool) {
	p := m.held[k]
	if forget {
		m.held = append(m.held[:k], m.held[k+1:]...)
	}
	got, err := p.r.Cancel(ctx)
	if err != nil {
		m.tb.Fatal(err)
	}
	want := p.e.Cancel()
	gone := p.r.epoch < m.times.at().UnixMicro()/(m.l.width/1000)-m.span // left the window by TIME
	if got != want && !(gone && !got) {
		m.tb.Fatalf("step %d: Cancel of %d units at %v (reserved at %v): redis %v, engine %v", step, p.r.Units(), m.times.at(), p.r.At(), got, want)
	}
	if got {
		m.cancelled++
	}
}

func (m *heldModel) settle(step, k int, actual int64) {
	p := m.held[k]
	m.held = append(m.held[:k], m.held[k+1:]...)
	got, err := p.r.Settle(ctx, actual)
	want, werr := p.e.SettleAt(actual, m.times.at())
	if (err == nil) != (werr == nil) || errors.Is(err, engine.ErrSettled) != errors.Is(werr, engine.ErrSettled) {
		m.tb.Fatalf("step %d: Settle(%d) of %d units: redis %v, engine %v", step, actual, p.r.Units(), err, werr)
	}
	if err == nil && got != want {
		m.tb.Fatalf("step %d: Settle(%d) of %d units at %v: redis %+v, engine %+v", step, actual, p.r.Units(), m.times.at(), got, want)
	}
	switch {
	case err != nil:
	case actual < p.r.Units():
		m.settledLess++
	case actual > p.r.Units():
		m.settledMore++
		if actual-p.r.Units() > m.l.cfg.Limit {
			m.debts++
		}
	}
}

// reset resets key on both: the reservations held from before give
// nothing back to the fresh count.
func (m *heldModel) reset(step int, key string) {
	if err := m.l.Reset(ctx, key); err != nil {
		m.tb.Fatalf("step %d: Reset(%q): %v", step, key, err)
	}
	m.ref.Reset(key)
	m.resets++
}

func (m *heldModel) charge(step int, key string, n int64) {
	got, err := m.l.ChargeN(ctx, key, n)
	if err != nil {
		m.tb.Fatal(err)
	}
	want, werr := m.ref.ChargeAt(key, n, m.times.at())
	if werr != nil || got != want {
		m.tb.Fatalf("step %d: ChargeN(%q, %d) at %v: redis %+v, engine %+v %v", step, key, n, m.times.at(), got, want, werr)
	}
	m.charged++
}

// A random run of Reserve, Cancel, Settle (fewer, equal, more units, and
// debts past the limit) and ChargeN, with copies and second calls, on two
// keys, matches the engine driven at the Redis time of each call.
func TestReserveMatchesEngine(t *testing.T) {
	s := redistest.Start(t)
	for _, tc := range []struct {
		alg engine.Algorithm
		n   int
	}{{engine.SlidingWindowStrict, 4}, {engine.SlidingWindow, 4}, {engine.FixedWindow, 0}, {engine.SlidingWindowStrict, 1}} {
		t.Run(fmt.Sprintf("%v/N=%d", tc.alg, tc.n), func(t *testing.T) {
			t.Parallel()
			cfg := engine.Config{Limit: 10, Window: 80 * time.Millisecond * time.Duration(max(1, tc.n)), SubWindows: tc.n, Algorithm: tc.alg}
			m := newHeldModel(t, s, cfg, fmt.Sprintf("held:%v:%d:", tc.alg, tc.n))
			rng := rand.New(rand.NewPCG(uint64(tc.alg), uint64(tc.n)))
			keys := []string{"a", "b{c}"}
			for i := range 500 {
				key := keys[rng.IntN(len(keys))]
				switch op := rng.IntN(10); {
				case i%100 == 99:
					// a Reset every 100 steps: which branch a random op
					// takes depends on what is held, so on the machine's
					// speed, and the rare random Reset may never come
					m.reset(i, key)
				case op < 4 || len(m.held) == 0:
					m.reserve(i, key, int64(rng.IntN(5)))
				case op < 6:
					m.cancel(i, rng.IntN(len(m.held)), rng.IntN(3) == 0)
				case op < 9:
					k := rng.IntN(len(m.held))
					actual := int64(rng.IntN(int(2*m.held[k].r.Units() + 2)))
					if rng.IntN(8) == 0 || m.debts == 0 && i >= 250 {
						actual = m.held[k].r.Units() + cfg.Limit*3 // a debt past the limit
					}
					m.settle(i, k, actual)
				case op < 10 && rng.IntN(8) == 0:
					m.reset(i, key)
				default:
					m.charge(i, key, int64(rng.IntN(8)))
				}
				if rng.IntN(25) == 0 {
					time.Sleep(time.Duration(rng.Int64N(int64(cfg.Window) * 3 / 2)))
				}
			}
			t.Logf("cancelled %d, settled to fewer %d, to more %d (debts past the limit %d), charged %d, resets %d", m.cancelled, m.settledLess, m.settledMore, m.debts, m.charged, m.resets)
			if m.cancelled == 0 || m.settledLess == 0 || m.settledMore == 0 || m.debts == 0 || m.charged == 0 || m.resets == 0 {
				t.Fatal("the run did not exercise every operation")
			}
		})
	}
}

// FuzzHeldOperations runs operation sequences from the fuzzer's bytes on a
// real redis-server against the engine (heldModel): the first byte picks
// the algorithm, then each pair of bytes is one operation on key "a" or
// "b" (the high bit of its first byte): reserve, cancel (kept or
// forgotten), settle, charge, Reset, or a pause of up to 15 ms (the sub-windows
// are 10 ms, the window 40 ms) that moves time on. CI runs the seeds;
// make fuzz runs more (redis-server runs the script serially: -parallel
// 2 keeps the fuzzer's workers from waiting on it).
func FuzzHeldOperations(f *testing.F) {
	f.Add([]byte{0, 0, 3, 2, 0, 3, 9, 4, 4, 5, 12, 2, 1})
	f.Add([]byte{1, 0, 5, 1, 4, 3, 30, 5, 15, 2, 0, 4, 2})
	f.Add([]byte{2, 0, 2, 0x80, 2, 5, 11, 3, 0, 0x83, 1, 4, 4})
	f.Add([]byte{0, 0, 5, 0, 5, 5, 15, 5, 15, 3, 60, 0x80, 4, 3, 1})
	f.Add([]byte{0, 0, 3, 0, 2, 4, 0, 0, 4, 1, 0, 2, 9, 1, 1})    // reserve, reserve, Reset, reserve, cancels and a settle across it
	f.Add([]byte{1, 0, 4, 4, 0, 2, 7, 0x80, 3, 4, 1, 1, 2, 1, 3}) // SlidingWindow: a settle to more after a Reset
	s := redistest.Start(f)
	var run atomic.Int64
	algs := []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || len(data) > 129 {
			return
		}
		alg := algs[int(data[0])%len(algs)]
		cfg := engine.Config{Limit: 8, Window: 40 * time.Millisecond, SubWindows: 4, Algorithm: alg}
		if alg == engine.FixedWindow {
			cfg.SubWindows = 0
		}
		m := newHeldModel(t, s, cfg, fmt.Sprintf("fuzz:%d:", run.Add(1)))
		for i := 1; i+1 < len(data); i += 2 {
			op, x := data[i], int64(data[i+1])
			key := "a"
			if op&0x80 != 0 {
				key = "b"
			}
			switch op & 0x7f % 6 {
			case 0:
				m.reserve(i, key, x%(cfg.Limit+1))
			case 1:
				if len(m.held) > 0 {
					m.cancel(i, int(x)%len(m.held), x&1 == 0)
				}
			case 2:
				if len(m.held) > 0 {
					k := int(x) % len(m.held)
					m.settle(i, k, x%(4*cfg.Limit))
				}
			case 3:
				m.charge(i, key, x%(3*cfg.Limit))
			case 4:
				m.reset(i, key)
			default:
				time.Sleep(time.Duration(x%16) * time.Millisecond)
			}
		}
	})
}
