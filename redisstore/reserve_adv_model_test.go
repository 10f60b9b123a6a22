package redisstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// advModel is an exact count model of one key inside one sub-window (the
// test's sub-windows are hours long, so every unit of a run is in the same
// one, and every algorithm's estimate is the plain sum): no engine, no
// timing. Reset starts a new generation; a reservation from an older one
// gives nothing back (Limiter.Reset), while a settle to more still charges.
type advModel struct {
	sum int64
	gen int
}

type advHeld struct {
	r       Reservation
	key     string
	n       int64
	gen     int
	claimed *bool
}

// Reserve, Cancel, Settle (fewer, equal, more, past the limit), ChargeN,
// Reset and copies, on three replicas and three keys, against the exact
// count model: every Allowed, every Remaining, every Cancel's report and
// every error kind; and Redis holds the model's sum at the end.
func TestAdvReserveMatchesCountModel(t *testing.T) {
	s := redistest.Start(t)
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingWindow, engine.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 20
			cfg := engine.Config{Limit: limit, Window: 24 * time.Hour, SubWindows: 4, Algorithm: alg}
			if alg == engine.FixedWindow {
				cfg.SubWindows = 0
			}
			var ls []*Limiter
			for range 3 {
				ls = append(ls, mustNew(t, client(t, s), cfg, WithPrefix("cm:"+alg.String()+":")))
			}
			model := map[string]*advModel{"a": {}, "b{x}": {}, "": {}}
			keys := []string{"a", "b{x}", ""}
			var held []advHeld
			var at time.Time
			rng := rand.New(rand.NewPCG(uint64(alg)+11, 3))
			remaining := func(m *advModel) int64 { return max(0, limit-m.sum) }
			for step := range 600 {
				l := ls[rng.IntN(len(ls))]
				key := keys[rng.IntN(len(keys))]
				m := model[key]
				switch op := rng.IntN(12); {
				case op < 5 || len(held) == 0:
					n := int64(rng.IntN(8))
					r, err := l.Reserve(ctx, key, n)
					if err != nil {
						t.Fatal(err)
					}
					want := n == 0 || m.sum+n <= limit // n = 0 is allowed, recording nothing
					if r.Decision().Allowed != want {
						t.Fatalf("step %d: Reserve(%q, %d) with %d counted: Allowed %v, want %v", step, key, n, m.sum, r.Decision().Allowed, want)
					}
					if want {
						m.sum += n
					}
					if r.Decision().Remaining != remaining(m) {
						t.Fatalf("step %d: Reserve(%q, %d): Remaining %d, want %d", step, key, n, r.Decision().Remaining, remaining(m))
					}
					if r.Units() > 0 {
						if at.IsZero() {
							at = r.At()
						} else if !r.At().Equal(at) {
							t.Skip("the run crossed a sub-window boundary; the model holds within one")
						}
						held = append(held, advHeld{r: r, key: key, n: n, gen: m.gen, claimed: new(bool)})
					}
				case op < 7:
					h := held[rng.IntN(len(held))]
					ok, err := h.r.Cancel(ctx) // a copy: h is a copy of the held value
					if err != nil {
						t.Fatal(err)
					}
					hm := model[h.key]
					want := !*h.claimed && hm.gen == h.gen
					if !*h.claimed {
						*h.claimed = true
						if want {
							hm.sum -= h.n
						}
					}
					if ok != want {
						t.Fatalf("step %d: Cancel of %d on %q: %v, want %v", step, h.n, h.key, ok, want)
					}
				case op < 10:
					h := held[rng.IntN(len(held))]
					actual := int64(rng.IntN(int(2*h.n + 2)))
					if rng.IntN(6) == 0 {
						actual = h.n + 2*limit
					}
					d, err := h.r.Settle(ctx, actual)
					hm := model[h.key]
					if *h.claimed {
						if !errors.Is(err, engine.ErrSettled) {
							t.Fatalf("step %d: a second Settle: %v, want ErrSettled", step, err)
						}
						continue
					}
					*h.claimed = true
					if err != nil {
						t.Fatalf("step %d: Settle(%d) of %d: %v", step, actual, h.n, err)
					}
					switch {
					case actual < h.n && hm.gen == h.gen:
						hm.sum -= h.n - actual
					case actual > h.n:
						hm.sum += actual - h.n
					}
					if d.Remaining != remaining(hm) || d.Allowed != (hm.sum+1 <= limit) {
						t.Fatalf("step %d: Settle(%d) of %d on %q: %+v, want Remaining %d (sum %d)", step, actual, h.n, h.key, d, remaining(hm), hm.sum)
					}
				case op < 11:
					n := int64(rng.IntN(6))
					d, err := l.ChargeN(ctx, key, n)
					if err != nil {
						t.Fatal(err)
					}
					m.sum += n
					if d.Remaining != remaining(m) || d.Allowed != (m.sum+1 <= limit) {
						t.Fatalf("step %d: ChargeN(%q, %d): %+v, want Remaining %d (sum %d)", step, key, n, d, remaining(m), m.sum)
					}
				default:
					if rng.IntN(3) == 0 {
						if err := l.Reset(ctx, key); err != nil {
							t.Fatal(err)
						}
						m.sum, m.gen = 0, m.gen+1
					}
				}
			}
			for _, key := range keys {
				if got := storedUnits(t, ls[0].client, ls[0], key); got != model[key].sum {
					t.Errorf("%q: Redis holds %d, the model %d", key, got, model[key].sum)
				}
			}
			t.Logf("%s", fmt.Sprint(model["a"].sum, model["b{x}"].sum, model[""].sum))
		})
	}
}
