package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestReserveCancelMatchesModel runs random scripts of ReserveAt, Cancel,
// SettleAt, ChargeAt, peeks, Sweep, UpdateLimits and SetLimitAt on one
// key, with KeyLimit changing under it and far jumps that retire the key's
// ring, against the model: every Decision, Units, At, Cancel and Settle,
// and an exact RetryAfter. Each script runs again under the engine's shared
// limit (no per-key limit, so no SetLimitAt, UpdateLimits or KeyLimit),
// where a reservation in the key's newest sub-window takes the ring's fast
// path.
func TestReserveCancelMatchesModel(t *testing.T) {
	algs := []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog}
	seeds := scaled(40, 300)
	if s := os.Getenv("RINGLIMIT_RESERVE_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	if testing.Short() {
		seeds = min(seeds, 50)
	}
	for _, alg := range algs {
		for _, N := range []int{1, 2, 3, 10} {
			for seed := 0; seed < seeds; seed++ {
				for _, shared := range []bool{false, true} {
					if err := runReserveCancelScript(alg, N, uint64(seed), shared); err != nil {
						t.Fatalf("%v N=%d seed=%d shared=%v: %v", alg, N, seed, shared, err)
					}
				}
			}
		}
	}
}

func runReserveCancelScript(alg engine.Algorithm, N int, seed uint64, shared bool) error {
	rng := rand.New(rand.NewPCG(seed, uint64(alg)*1000+uint64(N)))
	w := int64(1000 + rng.IntN(3)*7)
	L := int64(1 + rng.IntN(12))
	// A log holds 16 … 64 units, so that debts reach MaxLogLimit
	// (ErrDebtFull); a quarter of the counter scripts charge up to
	// MaxLimit at once, so that debts reach a sub-window's cap.
	cfg := engine.Config{Limit: L, Window: time.Duration(w * int64(N)), SubWindows: N, Algorithm: alg, PerKeyLimits: true, MaxLogLimit: 16 + rng.Int64N(49)}
	huge := alg != engine.SlidingLog && rng.IntN(4) == 0
	var kl int64
	useKL := rng.IntN(2) == 0 && !shared
	cfg.PerKeyLimits = !shared
	if useKL {
		cfg.KeyLimit = func(string) int64 { return kl }
	}
	base := int64(1_700_000_000_000_000_000)
	base -= base % (w * int64(N))
	clk := engine.NewManualClock(time.Unix(0, base))
	cfg.Clock = clk
	useSweep := rng.IntN(2) == 0
	if !useSweep {
		cfg.DisableEviction = true
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	m := newModel(cfg)
	k := m.key("k")
	W := int64(cfg.Window)
	setKL := func(v int64) { kl = v; m.keyLimit = v }
	type pair struct {
		r  engine.Reservation
		mr modelRes
	}
	res := make([]*pair, 0, 64)
	now := base
	maxT := base
	floor := base
	var trace []string
	fail := func(f string, a ...any) error {
		tail := trace
		if len(tail) > 30 {
			tail = tail[len(tail)-30:]
		}
		return fmt.Errorf(f+"\ntrace:\n%s", append(a, fmt.Sprint(tail))...)
	}
	for step := 0; step < 120; step++ {
		// time step
		switch x := rng.IntN(20); {
		case x < 8:
		case x < 13:
			now += rng.Int64N(w)
		case x < 15:
			now += w * int64(rng.IntN(N+2))
		case x < 17:
			now -= rng.Int64N(2 * w) // backwards
			if now < floor {
				now = floor
			}
		case x < 18:
			now += W + rng.Int64N(2*w)
		case x == 18:
			if alg != engine.SlidingLog && cfg.DisableEviction {
				now += w * (1<<21 - int64(rng.IntN(2*N+3)) + int64(N))
			} else {
				now += w * (1 << 20)
			}
		default:
			now = maxT + rng.Int64N(w)
		}
		maxT = max(maxT, now)
		if useKL && rng.IntN(10) == 0 {
			setKL(int64(rng.IntN(14)))
			trace = append(trace, fmt.Sprintf("keylimit -> %d", kl))
		}
		switch op := rng.IntN(13); {
		case op == 10 && len(res) > 0:
			// Settle one, to fewer, as many or more units, copies
			// included (a settled or cancelled one refuses).
			i := rng.IntN(len(res))
			p := res[i]
			cp := p.r
			actual := rng.Int64N(2*L + 2)
			if huge && rng.IntN(3) == 0 {
				actual = p.mr.n + rng.Int64N(engine.MaxLimit+1)
			}
			got, err := cp.SettleAt(actual, time.Unix(0, now))
			switch {
			case p.mr.ev < 0:
				if !errors.Is(err, engine.ErrNotReserved) {
					return fail("step %d settle #%d: %v, want ErrNotReserved", step, i, err)
				}
			case m.claimed[p.mr]:
				if !errors.Is(err, engine.ErrSettled) {
					return fail("step %d settle #%d: %v, want ErrSettled", step, i, err)
				}
			case actual > p.mr.n && m.chargeFull("k", actual-p.mr.n, now, cfg.MaxLogLimit):
				// As a refused charge, which changes nothing: the
				// reservation stays settled at its units.
				if !errors.Is(err, engine.ErrDebtFull) {
					return fail("step %d settle #%d to %d: %v, want ErrDebtFull", step, i, actual, err)
				}
				m.claimed[p.mr] = true
				if want := m.peek("k", 1, now); got != want {
					return fail("step %d refused settle: got %+v, model %+v", step, got, want)
				}
			default:
				want := m.settle(p.mr, actual, now)
				trace = append(trace, fmt.Sprintf("settle #%d to %d at +%d -> %+v (model %+v)", i, actual, now-base, got, want))
				if err != nil || got != want {
					return fail("step %d settle #%d to %d at +%d: got %+v %v, model %+v", step, i, actual, now-base, got, err, want)
				}
			}
		case op == 11:
			n := rng.Int64N(3 * L)
			if huge && rng.IntN(2) == 0 {
				n = rng.Int64N(engine.MaxLimit + 1)
			}
			full := n > 0 && m.chargeFull("k", n, now, cfg.MaxLogLimit)
			got, err := e.ChargeAt("k", n, time.Unix(0, now))
			if full != errors.Is(err, engine.ErrDebtFull) {
				return fail("step %d charge %d at +%d: %v, model full %v", step, n, now-base, err, full)
			}
			if full {
				// A log holds at most MaxLogLimit units in its window, a
				// sub-window MaxLimit; the refused charge changes
				// nothing, not even the key's time.
				if want := m.peek("k", 1, now); got != want {
					return fail("step %d refused charge %d: got %+v, model %+v", step, n, got, want)
				}
				break
			}
			want := m.charge("k", n, now)
			trace = append(trace, fmt.Sprintf("charge %d at +%d -> %+v (model %+v)", n, now-base, got, want))
			if err != nil || got != want {
				return fail("step %d charge %d at +%d: got %+v %v, model %+v", step, n, now-base, got, err, want)
			}
		case op < 5:
			n := int64(rng.IntN(int(L) + 1))
			if rng.IntN(20) == 0 {
				n = m.lim(k) + 1
			}
			p := &pair{}
			p.r = e.ReserveAt("k", n, time.Unix(0, now))
			d := p.r.Decision()
			md, mr := m.reserve("k", n, now)
			p.mr = mr
			trace = append(trace, fmt.Sprintf("#%d reserve n=%d t=+%d -> %+v (model %+v)", len(res), n, now-base, d, md))
			if d.Allowed != md.Allowed || d.Remaining != md.Remaining || d.Limit != md.Limit {
				return fail("step %d reserve n=%d at +%d: got %+v, model %+v", step, n, now-base, d, md)
			}
			if !d.Allowed && n > 0 && n <= m.lim(k) {
				R := int64(d.RetryAfter)
				if R <= 0 || d.RetryAfter == engine.Never {
					return fail("limited denial with RetryAfter %v", d.RetryAfter)
				}
				before := e.AllowAt("k", 0, time.Unix(0, now+R-1)).Remaining
				at := e.AllowAt("k", 0, time.Unix(0, now+R)).Remaining
				if before >= n || at < n {
					return fail("RetryAfter %v not exact: remaining %d just before, %d at (n=%d)", d.RetryAfter, before, at, n)
				}
			}
			var units int64
			if mr.ev >= 0 {
				units = n
			}
			if p.r.Units() != units {
				return fail("units %d model %d", p.r.Units(), units)
			}
			if units > 0 {
				want := m.epoch(k.log[mr.ev].t) * m.w // the start of its effective epoch
				if p.r.At().UnixNano() != want {
					return fail("At %d want %d", p.r.At().UnixNano()-base, want-base)
				}
			} else if !p.r.At().IsZero() {
				return fail("At nonzero for unrecorded")
			}
			res = append(res, p)
		case op < 8 && len(res) > 0:
			i := rng.IntN(len(res))
			p := res[i]
			got := p.r.Cancel()
			want := m.cancel(p.mr)
			trace = append(trace, fmt.Sprintf("cancel #%d (ev=%d gen=%d; key newest=%d gen=%d) -> %v (model %v)", i, p.mr.ev, p.mr.gen, k.newest, k.gen, got, want))
			if got != want {
				return fail("step %d cancel #%d: got %v, model %v", step, i, got, want)
			}
		case op < 9:
			// peek at now
			d := e.AllowAt("k", 0, time.Unix(0, now))
			md, _ := m.reserve("k", 0, now)
			trace = append(trace, fmt.Sprintf("peek t=+%d -> %+v (model %+v)", now-base, d, md))
			if d.Remaining != md.Remaining {
				return fail("step %d peek at +%d: got %+v model %+v", step, now-base, d, md)
			}
		default:
			if useSweep && rng.IntN(2) == 0 {
				clk.Set(time.Unix(0, maxT))
				before := e.Len()
				n := e.Sweep()
				trace = append(trace, fmt.Sprintf("sweep at +%d: %d (len %d)", maxT-base, n, before))
				if n > 0 {
					m.reclaim(k)
					now = maxT // no request older than the reclamation
					floor = maxT
				}
			} else if !shared && k.live && rng.IntN(2) == 0 {
				nl := int64(1 + rng.IntN(16))
				if err := e.UpdateLimits(func(string, int64) int64 { return nl }); err != nil {
					return fail("updatelimits: %v", err)
				}
				k.limit = nl
				trace = append(trace, fmt.Sprintf("updatelimits %d", nl))
			} else if !shared && k.live {
				nl := int64(1 + rng.IntN(16))
				if err := e.SetLimitAt("k", nl, time.Unix(0, now)); err != nil {
					return fail("setlimit: %v", err)
				}
				m.setLimit("k", nl, now)
				trace = append(trace, fmt.Sprintf("setlimit %d at +%d", nl, now-base))
			}
		}
	}
	// final: cancel everything, then a sequential fill reaches the model's capacity
	for i, p := range res {
		got := p.r.Cancel()
		want := m.cancel(p.mr)
		if got != want {
			return fail("final cancel #%d: got %v, model %v", i, got, want)
		}
	}
	d := e.AllowAt("k", 0, time.Unix(0, now))
	md, _ := m.reserve("k", 0, now)
	if d.Remaining != md.Remaining {
		return fail("final peek: got %+v model %+v", d, md)
	}
	return nil
}
