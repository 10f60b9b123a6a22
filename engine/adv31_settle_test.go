package engine_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// advBase is a fixed instant on the Unix grid of every sub-window used here.
var advBase = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func advAt(ns int64) time.Time { return time.Unix(0, advBase.UnixNano()+ns) }

type advRes struct {
	r    engine.Reservation
	e    int64 // the model's epoch (log: time) of the units
	n    int64
	done bool
}

// Random sequences of AllowAt, ReserveAt, SettleAt, Cancel, ChargeAt and
// peeks on one key, at instants that mostly move forward but sometimes
// backwards, decided against advModel step by step, and then judged by the
// self-audit (Audit: 1, every key): the promises are docs/semantics.md's
// "Both return the Decision a one-unit request would get at now", "RetryAfter
// is exact, as always: the least wait after which the request fits with no
// other traffic, debts counted", and AuditReport's "Strict makes no false
// admits ...; SlidingLog makes neither when a key's decisions are not
// concurrent", with "a refusal over a debt is right, not a false deny".
func TestAdv31SettleChargeSequencesMatchModel(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for seed := uint64(1); seed <= advSeeds; seed++ {
				advRunSequence(t, alg, seed)
				if t.Failed() {
					return
				}
			}
		})
	}
}

func advRunSequence(t *testing.T, alg engine.Algorithm, seed uint64) {
	advRunSequenceCap(t, alg, seed, 100_000)
}

func advRunSequenceCap(t *testing.T, alg engine.Algorithm, seed uint64, logCap int64) {
	advRunSequenceOpt(t, alg, seed, logCap, false)
}

// advRunSequenceOpt with tiny: a 40 ns window of 10 ns sub-windows, so that
// counts near MaxLimit stay in int64 in the model, and charges and debts of
// up to MaxLimit units.
func advRunSequenceOpt(t *testing.T, alg engine.Algorithm, seed uint64, logCap int64, tiny bool) {
	cfg := engine.Config{Limit: 10, Window: 4 * time.Second, SubWindows: 4, Algorithm: alg,
		DisableEviction: true, Audit: 1, MaxLogLimit: logCap, PerKeyLimits: true}
	back, fwd := int64(500*time.Millisecond), int64(700*time.Millisecond)
	if tiny {
		cfg.Window = 40
		back, fwd = 5, 7
	}
	e, err := engine.New(cfg)
	require.NoError(t, err)
	defer e.Close()
	m := newAdvModel(cfg)
	rng := rand.New(rand.NewPCG(seed, 31))
	const key = "k"
	var now int64 = 10 * int64(time.Second)
	if tiny {
		now = 100
	}
	var res []*advRes
	var charged, unadmits int64
	for step := range 300 {
		switch rng.IntN(10) {
		case 0:
			now -= rng.Int64N(back)
		default:
			now += rng.Int64N(fwd)
		}
		at := advAt(now)
		ctx := fmt.Sprintf("seed %d step %d at %d (epoch %d)", seed, step, now, now/m.w)
		if advTrace {
			t.Logf("%s", ctx)
		}
		switch op := rng.IntN(8); op {
		case 7: // SetLimitAt, rarely
			if rng.IntN(4) != 0 {
				continue
			}
			l := 3 + rng.Int64N(20)
			require.NoError(t, e.SetLimitAt(key, l, at), ctx)
			advLog(t, "SetLimitAt(%d)", l)
			m.eff(now)
			m.limit = l
		case 0: // AllowAt
			n := rng.Int64N(min(5, m.limit+1))
			want, _ := m.decide(n, now)
			got := e.AllowAt(key, n, at)
			advLog(t, "AllowAt(%d) = %+v", n, got)
			require.Equal(t, want, got, "%s AllowAt(%d)", ctx, n)
		case 1, 2: // ReserveAt
			n := 1 + rng.Int64N(min(5, m.limit))
			want, ep := m.decide(n, now)
			r := e.ReserveAt(key, n, at)
			advLog(t, "ReserveAt(%d) = %+v", n, r.Decision())
			require.Equal(t, want, r.Decision(), "%s ReserveAt(%d)", ctx, n)
			if want.Allowed {
				res = append(res, &advRes{r: r, e: ep, n: n})
			}
		case 3, 4: // SettleAt
			if len(res) == 0 {
				continue
			}
			x := res[rng.IntN(len(res))]
			actual := rng.Int64N(2*m.limit + 1)
			if tiny && rng.IntN(3) == 0 {
				actual = x.n + rng.Int64N(engine.MaxLimit+1)
			}
			got, err := x.r.SettleAt(actual, at)
			advLog(t, "SettleAt(%d) of %d at epoch %d = %+v %v", actual, x.n, x.e, got, err)
			if x.done {
				require.ErrorIs(t, err, engine.ErrSettled, ctx)
				continue
			}
			x.done = true
			if actual > x.n && alg != engine.SlidingLog && m.counterFull(actual-x.n, now) {
				require.ErrorIs(t, err, engine.ErrDebtFull, "%s SettleAt(%d) of %d", ctx, actual, x.n)
				continue
			}
			if actual > x.n && alg == engine.SlidingLog && m.logFull(actual-x.n, now, logCap) {
				require.ErrorIs(t, err, engine.ErrDebtFull, "%s SettleAt(%d) of %d", ctx, actual, x.n)
				continue
			}
			require.NoError(t, err, ctx)
			if actual > x.n {
				charged++
			}
			if actual < x.n && m.cancelWould(x.e) {
				unadmits++
			}
			want := m.settle(x.e, x.n, actual, now)
			require.Equal(t, want, got, "%s SettleAt(%d) of %d reserved at %d", ctx, actual, x.n, x.e)
		case 5: // Cancel
			if len(res) == 0 {
				continue
			}
			x := res[rng.IntN(len(res))]
			got := x.r.Cancel()
			advLog(t, "Cancel of %d at epoch %d = %v", x.n, x.e, got)
			if x.done {
				require.False(t, got, ctx)
				continue
			}
			x.done = true
			want := m.cancel(x.e, x.n)
			require.Equal(t, want, got, "%s Cancel of %d at %d", ctx, x.n, x.e)
			if got {
				unadmits++
			}
		case 6: // ChargeAt, or a peek
			n := rng.Int64N(2 * m.limit)
			if tiny && alg != engine.SlidingLog && rng.IntN(2) == 0 {
				n = rng.Int64N(engine.MaxLimit + 1)
			}
			if rng.IntN(3) == 0 {
				want, _ := m.decide(0, now)
				got := e.AllowAt(key, 0, at)
				advLog(t, "peek = %+v", got)
				require.Equal(t, want, got, "%s peek", ctx)
				continue
			}
			got, err := e.ChargeAt(key, n, at)
			advLog(t, "ChargeAt(%d) = %+v %v", n, got, err)
			if n > 0 && alg != engine.SlidingLog && m.counterFull(n, now) {
				require.ErrorIs(t, err, engine.ErrDebtFull, "%s ChargeAt(%d)", ctx, n)
				continue
			}
			if n > 0 && alg == engine.SlidingLog && m.logFull(n, now, logCap) {
				require.ErrorIs(t, err, engine.ErrDebtFull, "%s ChargeAt(%d)", ctx, n)
				continue
			}
			require.NoError(t, err, ctx)
			if n > 0 {
				charged++
			}
			want := m.charge(n, now)
			require.Equal(t, want, got, "%s ChargeAt(%d)", ctx, n)
		}
	}
	rep := e.Audit()
	require.Zero(t, rep.Dropped, "seed %d", seed)
	require.Equal(t, charged, rep.Charges, "seed %d: every charge (ChargeAt n ≥ 1, Settle above) is replayed", seed)
	if alg == engine.SlidingWindowStrict || alg == engine.SlidingLog {
		require.Zero(t, rep.FalseAdmits, "seed %d: %+v", seed, rep)
		require.LessOrEqual(t, rep.WorstWindow, 1.0, "seed %d: WorstWindow ≤ 1 for Strict and SlidingLog, debts or not: %+v", seed, rep)
	}
	if alg == engine.SlidingLog {
		require.Zero(t, rep.FalseDenies, "seed %d: %+v", seed, rep)
	}
	require.Equal(t, unadmits, rep.Unadmits, "seed %d: every Cancel that gave units back and every Settle below its units that did, once: %+v", seed, rep)
}

// keep the imports used while probes are added and removed.
var advTrace = os.Getenv("ADVTRACE") != ""

var _ = errors.Is
var _ = math.MaxInt64

func advLog(t *testing.T, f string, a ...any) {
	if advTrace {
		t.Helper()
		t.Logf(f, a...)
	}
}

var advSeeds = func() uint64 {
	if os.Getenv("ADVSEEDS") != "" {
		return 2000
	}
	return 40
}()

// SlidingLog with a small MaxLogLimit (40, limits up to 23): charges and
// settles' debts that would put more than MaxLogLimit units in the key's
// window are refused whole with ErrDebtFull, the rest as before, against
// the model; the log grows and is refused at its cap on the way.
func TestAdv31LogDebtCapSequences(t *testing.T) {
	for seed := uint64(1); seed <= advSeeds; seed++ {
		advRunSequenceCap(t, engine.SlidingLog, seed, 40)
		if t.Failed() {
			return
		}
	}
}

// Counters at the top of their range: a 40 ns window, charges and debts of
// up to MaxLimit units, refused whole (ErrDebtFull) past 2^40 − 1 in one
// sub-window, against the model; Decisions (Remaining, RetryAfter) with
// counts of several times MaxLimit.
func TestAdv31HugeCountSequences(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			for seed := uint64(1); seed <= advSeeds; seed++ {
				advRunSequenceOpt(t, alg, seed, 100_000, true)
				if t.Failed() {
					return
				}
			}
		})
	}
}
