package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// Tests of a request's cost n at the edges of int64: every n outside
// 1 … the key's limit is refused with RetryAfter Never, records nothing and
// reports the key's real Remaining, at every entry point (AllowAt, ReserveAt,
// AllowAll, Wait), also after SetLimit lowered the key's limit below what
// it holds. The model (model_test.go) decides them with big integers.

// edgeCosts are costs near the edges of int64, and near the limit l.
func edgeCosts(l int64) []int64 {
	return []int64{
		math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 2, math.MaxInt64 - l, math.MaxInt64 - l + 1,
		math.MinInt64, math.MinInt64 + 1, math.MinInt64 + l, -l, -1,
		l + 1, 2 * l, 1 << 40, 1<<40 - 1, 1 << 53, 1<<53 + 1, 1 << 62,
	}
}

// A cost above the key's limit, or negative, is refused with Never at every
// entry point and records nothing. On the code before, SlidingLog admitted
// math.MaxInt64 on a key holding 1 unit (size + n wrapped), and every
// algorithm admitted math.MaxInt64 and math.MaxInt64 − 1 once SetLimit had
// lowered a key's limit below what it held (limit − count − n wrapped):
// AllowAt said Allowed, Reserve's Units was n, Wait returned nil and
// AllowAll −1.
func TestCostOutsideTheLimitIsNeverAdmitted(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, lowered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/lowered=%v", alg, lowered), func(t *testing.T) {
				clk := engine.NewManualClock(t0)
				e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: alg, PerKeyLimits: true, Clock: clk, DisableEviction: true})
				limit, remaining := int64(10), int64(9)
				if lowered {
					require.True(t, e.AllowAt("k", 5, t0).Allowed)
					require.NoError(t, e.SetLimitAt("k", 2, t0))
					limit, remaining = 2, 0
				} else {
					require.True(t, e.AllowAt("k", 1, t0).Allowed)
				}
				never := engine.Decision{Limit: limit, Remaining: remaining, RetryAfter: engine.Never}
				for _, n := range edgeCosts(limit) {
					require.Equal(t, never, e.AllowAt("k", n, t0), "AllowAt n=%d", n)
					require.Equal(t, never, e.AllowN("k", n), "AllowN n=%d", n)
					r := e.ReserveAt("k", n, t0)
					require.Equal(t, never, r.Decision(), "ReserveAt n=%d", n)
					require.Zero(t, r.Units(), "ReserveAt n=%d", n)
					require.False(t, r.Cancel(), "ReserveAt n=%d", n)
					at, d := engine.AllowAll(t0, engine.Request{Engine: e, Key: "k", N: n})
					require.Equal(t, 0, at, "AllowAll n=%d", n)
					require.Equal(t, never, d, "AllowAll n=%d", n)
					d, err := e.Wait(context.Background(), "k", n)
					require.ErrorIs(t, err, engine.ErrNeverAdmitted, "Wait n=%d", n)
					require.Equal(t, never, d, "Wait n=%d", n)
					require.Equal(t, engine.ReasonNever, d.Reason())
				}
				require.Equal(t, remaining, e.AllowAt("k", 0, t0).Remaining, "nothing was recorded")
			})
		}
	}
}

// n equal to the limit fits an empty window exactly, also at MaxLimit (the
// largest count a slot holds) and at MaxLogLimit, and the next unit is
// refused; the limit plus one is Never.
func TestCostOfTheWholeLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			top := int64(engine.MaxLimit)
			if alg == engine.SlidingLog {
				top = 1 << 10
			}
			for _, l := range []int64{1, 7, top} {
				e := newEngine(t, engine.Config{Limit: l, Window: time.Second, Algorithm: alg, MaxLogLimit: int64(1 << 10), DisableEviction: true})
				require.Equal(t, engine.Decision{Limit: l, Remaining: l, RetryAfter: engine.Never}, e.AllowAt("k", l+1, t0), "l=%d", l)
				require.Equal(t, engine.Decision{Allowed: true, Limit: l}, e.AllowAt("k", l, t0), "l=%d", l)
				d := e.AllowAt("k", 1, t0)
				require.False(t, d.Allowed, "l=%d", l)
				require.Equal(t, engine.ReasonLimited, d.Reason(), "l=%d", l)
				require.Equal(t, engine.Decision{Limit: l, RetryAfter: engine.Never}, e.AllowAt("k", math.MaxInt64, t0), "l=%d", l)
			}
		})
	}
}

// FuzzCostEdges runs scripts of requests whose costs lie near the edges of
// int64 and near the key's limit, through AllowAt, ReserveAt, AllowAll and
// Wait, between SetLimit calls that lower and raise the key's limit (up to
// the largest one allowed), and checks every decision against the model.
// Each pair of bytes (a, b) is one step: a picks the operation, the key and
// the time step, b the cost or the new limit.
func FuzzCostEdges(f *testing.F) {
	// Seeds, per algorithm. Bytes (1, b) are AllowAt of edge cost b (0:
	// math.MaxInt64, 1: MaxInt64 − 1, 5: MinInt64, 18: 1 unit, 19: 2, 22:
	// the largest limit; see costs), (3, b) ReserveAt, (5, b) AllowAll,
	// (7, b) Wait, and (0, b) SetLimit to b+1, or to the largest limit for
	// b ≥ 240.
	for alg := range uint8(4) {
		// A key holding 1 unit asked for math.MaxInt64 at every entry point.
		f.Add(alg, uint8(9), []byte{1, 18, 1, 0, 3, 0, 5, 0, 7, 0})
		// 5 units, the limit lowered to 2, then costs near both edges.
		f.Add(alg, uint8(9), []byte{1, 19, 1, 19, 1, 18, 0, 1, 1, 0, 1, 1, 3, 0, 5, 1, 7, 0, 1, 5, 1, 4})
		// The largest limit, a cost of exactly that, then lowered and raised.
		f.Add(alg, uint8(15), []byte{0, 240, 1, 22, 1, 18, 1, 10, 0, 1, 1, 0, 3, 1, 0, 240, 1, 18, 7, 0})
	}
	f.Fuzz(func(t *testing.T, alg, lim uint8, data []byte) {
		alg %= 4
		cfg := engine.Config{
			Limit: int64(lim%16) + 1, Window: time.Second, SubWindows: 4, Algorithm: engine.Algorithm(alg),
			PerKeyLimits: true, MaxLogLimit: 64, DisableEviction: true,
		}
		if cfg.Algorithm == engine.FixedWindow || cfg.Algorithm == engine.SlidingLog {
			cfg.SubWindows = 0
		}
		maxLimit := int64(engine.MaxLimit)
		if cfg.Algorithm == engine.SlidingLog {
			maxLimit = cfg.MaxLogLimit
		}
		clk := engine.NewManualClock(t0)
		cfg.Clock = clk
		e, err := engine.New(cfg)
		require.NoError(t, err)
		defer e.Close()
		ref := newModel(cfg)
		w := int64(cfg.Window) / int64(max(cfg.SubWindows, 1))
		now := t0.UnixNano()
		for i := 0; i+1 < len(data) && i < 400; i += 2 {
			a, b := data[i], data[i+1]
			now += w * int64(a>>4) / 4
			clk.Set(time.Unix(0, now))
			at := time.Unix(0, now)
			key := []string{"a", "b"}[a>>3&1]
			if a&7 == 0 {
				l := int64(b%16) + 1
				if b >= 240 {
					l = maxLimit
				}
				require.NoError(t, e.SetLimitAt(key, l, at))
				ref.setLimit(key, l, now)
				continue
			}
			l := ref.lim(ref.key(key))
			costs := append(edgeCosts(l), 0, 1, 2, l-1, l, maxLimit)
			n := costs[int(b)%len(costs)]
			if int(b) >= 2*len(costs) && i+9 < len(data) { // the fuzzer's own n
				n = int64(binary.LittleEndian.Uint64(data[i+2:]))
				i += 8
			}
			what := fmt.Sprintf("step %d: key %q n=%d (limit %d)", i/2, key, n, l)
			switch a & 7 {
			case 1, 2:
				require.Equal(t, ref.decide(key, n, now), e.AllowAt(key, n, at), "AllowAt, %s", what)
			case 3, 4:
				want, _ := ref.reserve(key, n, now)
				r := e.ReserveAt(key, n, at)
				require.Equal(t, want, r.Decision(), "ReserveAt, %s", what)
				units := int64(0)
				if want.Allowed {
					units = max(n, 0)
				}
				require.Equal(t, units, r.Units(), "ReserveAt's units, %s", what)
			case 5, 6:
				wantAt, want := ref.allowAll(at, []string{key}, []int64{n})
				gotAt, got := engine.AllowAll(at, engine.Request{Engine: e, Key: key, N: n})
				require.Equal(t, wantAt, gotAt, "AllowAll, %s", what)
				require.Equal(t, want, got, "AllowAll, %s", what)
			default:
				want := ref.decide(key, n, now)
				if !want.Allowed && want.RetryAfter != engine.Never {
					// Limited: Wait would sleep. Ask AllowAt instead.
					require.Equal(t, want, e.AllowAt(key, n, at), "AllowAt, %s", what)
					continue
				}
				got, err := e.Wait(context.Background(), key, n)
				require.Equal(t, want, got, "Wait, %s", what)
				require.Equal(t, want.Allowed, err == nil, "Wait: %v, %s", err, what)
				if !want.Allowed && !errors.Is(err, engine.ErrNeverAdmitted) {
					t.Fatalf("Wait: %v, want ErrNeverAdmitted; %s", err, what)
				}
			}
		}
	})
}
