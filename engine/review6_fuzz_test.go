package engine_test

import (
	"fmt"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Sequential random reserve/cancel scripts with shared instants, steps back,
// SetLimitAt, AllowAll refusals, Sweep, tiny buffers and caps. Checks only
// the documented invariants (no exact model).
func TestReview6AuditInvariantFuzz(t *testing.T) {
	seeds := scaled[int64](40, 300)
	if s := os.Getenv("ADV6_SEEDS"); s != "" {
		fmt.Sscan(s, &seeds)
	}
	algs := []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog, engine.SlidingWindow, engine.FixedWindow}
	for _, alg := range algs {
		for seed := int64(1); seed <= seeds; seed++ {
			alg, seed := alg, seed
			t.Run(fmt.Sprintf("%v/%d", alg, seed), func(t *testing.T) {
				rng := rand.New(rand.NewSource(seed))
				sub := []int{1, 2, 3, 10}[rng.Intn(4)]
				win := time.Duration(999_999_999) / time.Duration(sub) * time.Duration(sub)
				if rng.Intn(2) == 0 && sub != 3 {
					win = time.Second
				}
				limit := int64(1 + rng.Intn(6))
				clk := engine.NewManualClock(advT0)
				nkeys := 1 + rng.Intn(3)
				cfg := engine.Config{Limit: limit, Window: win, SubWindows: sub, Algorithm: alg, Audit: 1, Clock: clk, PerKeyLimits: true}
				if rng.Intn(3) == 0 {
					cfg.AuditBuffer = 64
				}
				if rng.Intn(3) == 0 {
					cfg.AuditMaxEntries = int64(1 + rng.Intn(6))
				}
				if rng.Intn(3) == 0 {
					cfg.AuditMaxKeys = 1
				}
				if rng.Intn(2) == 0 {
					cfg.DisableEviction = true
				}
				e := advNew(t, cfg)
				keys := []string{"a", "b", "c"}[:nkeys]
				lim := map[string]int64{}
				maxLim := limit
				for _, k := range keys {
					lim[k] = limit
				}
				type held struct {
					r   *engine.Reservation
					key string
				}
				var hs []held
				var cancels int64
				now := advT0.Add(time.Duration(rng.Int63n(int64(time.Second))))
				newest := now
				var hist []string
				logf := func(f string, a ...any) { hist = append(hist, fmt.Sprintf(f, a...)) }
				check := func(r engine.AuditReport) {
					bad := ""
					if r.Decisions != r.Admits+r.Denies || r.Decisions != r.Judged+r.Unjudged {
						bad += " inconsistent;"
					}
					if (alg == engine.SlidingWindowStrict || alg == engine.SlidingLog) && r.FalseAdmits != 0 {
						bad += " false admit;"
					}
					if cfg.AuditMaxEntries > 0 && r.Entries > cfg.AuditMaxEntries {
						bad += " entries>max;"
					}
					bound := maxLim
					if alg == engine.SlidingWindow || alg == engine.FixedWindow {
						bound = 2 * maxLim
					}
					if r.Entries > bound*int64(nkeys) {
						bad += " entries>window bound;"
					}
					if r.Unadmits > cancels {
						bad += " unadmits>cancels;"
					}
					if r.Entries < 0 || r.Keys < 0 {
						bad += " negative;"
					}
					if bad == "" && os.Getenv("ADV6_NORESET") == "" {
						hist = append(hist[:0], fmt.Sprintf("-- check ok %+v", r))
					}
					if bad != "" {
						for _, h := range hist[max(0, len(hist)-400):] {
							t.Log(h)
						}
						t.Fatalf("%s cancels=%d cfg=%+v\n%+v", bad, cancels, cfg, r)
					}
				}
				stopAt := 300
				if v := os.Getenv("ADV6_STOPAT"); v != "" {
					fmt.Sscan(v, &stopAt)
				}
				for i := 0; i < stopAt; i++ {
					switch r := rng.Intn(100); {
					case r < 35:
						// same instant
					case r < 70:
						now = now.Add(time.Duration(rng.Int63n(int64(win) / 3)))
					case r < 80:
						now = now.Add(-time.Duration(rng.Int63n(int64(win))))
					case r < 85:
						now = now.Add(time.Duration(rng.Int63n(3 * int64(win))))
					}
					if now.After(newest) {
						newest = now
					}
					clk.Set(newest)
					key := keys[rng.Intn(nkeys)]
					n := rng.Int63n(lim[key] + 2)
					switch op := rng.Intn(24); {
					case op < 6:
						d := e.AllowAt(key, n, now)
						logf("AllowAt(%s,%d,%v)=%v", key, n, now.Sub(advT0), d.Allowed)
					case op < 11:
						rv := new(engine.Reservation)
						*rv = e.ReserveAt(key, n, now)
						logf("ReserveAt(%s,%d,%v)=%v at %v", key, n, now.Sub(advT0), rv.Decision().Allowed, rv.At().Sub(advT0))
						if rv.Decision().Allowed {
							hs = append(hs, held{rv, key})
						}
					case op < 16 && len(hs) > 0:
						j := rng.Intn(len(hs))
						if rng.Intn(2) == 0 {
							j = len(hs) - 1
						}
						p := &hs[j]
						pr := p.r
						pkey := p.key
						hs = append(hs[:j], hs[j+1:]...)
						c := pr.Cancel()
						logf("Cancel(%s at %v n=%d) clock %v = %v", pkey, pr.At().Sub(advT0), pr.Units(), newest.Sub(advT0), c)
						if c {
							cancels++
						}
					case op < 18:
						k2 := keys[rng.Intn(nkeys)]
						n2 := rng.Int63n(lim[k2] + 2)
						idx, d := engine.AllowAll(now, engine.Request{Engine: e, Key: key, N: n}, engine.Request{Engine: e, Key: k2, N: n2}, engine.Request{Engine: e, Key: key, N: 1})
						logf("AllowAll(%v,%s:%d,%s:%d,%s:1)=%d %v", now.Sub(advT0), key, n, k2, n2, key, idx, d.Allowed)
						if idx > 0 {
							cancels += int64(idx) // upper bound on internal cancels
						}
					case op < 20:
						nl := 1 + rng.Int63n(6)
						if err := e.SetLimitAt(key, nl, now); err != nil {
							logf("SetLimitAt err %v", err)
							break
						}
						lim[key] = nl
						if nl > maxLim {
							maxLim = nl
						}
						logf("SetLimitAt(%s,%d,%v)", key, nl, now.Sub(advT0))
					case op < 21 && cfg.AuditBuffer == 64 && rng.Intn(2) == 0:
						b := 30 + rng.Intn(60)
						for q := 0; q < b; q++ {
							e.AllowAt(key, n, now)
						}
						logf("burst %d x AllowAt(%s,%d,%v)", b, key, n, now.Sub(advT0))
					case op < 21:
						k := e.Sweep()
						logf("Sweep()=%d at %v", k, newest.Sub(advT0))
					default:
						if rng.Intn(4) == 0 || cfg.AuditBuffer != 64 {
							r := e.Audit()
							check(r)
						}
					}
				}
				check(e.Audit())
			})
		}
	}
}
