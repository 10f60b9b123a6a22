package engine_test

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// TestAuditReserveCancel: a reservation on a sampled key is audited like
// AllowAt, and a Cancel that gives units back takes them out of the
// audit's log, so a later admission into the freed room is not a false
// admit. A Cancel that gives nothing back (the sub-window has left the
// window) changes nothing; AllowAll's cancels are taken out too.
func TestAuditReserveCancel(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, Clock: clk, DisableEviction: true})
			at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
			r := e.ReserveAt("k", 10, at(10))
			require.True(t, r.Decision().Allowed)
			clk.Set(at(20))
			require.True(t, r.Cancel())
			require.True(t, e.AllowAt("k", 10, at(30)).Allowed) // into the freed room
			rep := e.Audit()
			require.Equal(t, int64(2), rep.Admits)
			require.Equal(t, int64(1), rep.Unadmits)
			require.Zero(t, rep.UnadmitMissed)
			require.Zero(t, rep.FalseAdmits, "the cancelled units were taken out of the log: %+v", rep)
			require.Equal(t, 1.0, rep.WorstWindow)

			// AllowAll: "k" is full, so reserving "j" then "k" cancels "j".
			idx, _ := engine.AllowAll(at(40), engine.Request{Engine: e, Key: "j", N: 10}, engine.Request{Engine: e, Key: "k", N: 1})
			require.Equal(t, 1, idx)
			require.True(t, e.AllowAt("j", 10, at(50)).Allowed)
			rep = e.Audit()
			require.Equal(t, int64(2), rep.Unadmits)
			require.Zero(t, rep.FalseAdmits, "%+v", rep)

			// A cancel after the sub-window has left the key's window gives
			// nothing back, in the engine and in the log.
			late := e.ReserveAt("m", 4, at(100))
			require.True(t, late.Decision().Allowed)
			require.True(t, e.AllowAt("m", 1, at(3000)).Allowed)
			clk.Set(at(3000))
			require.False(t, late.Cancel())
			rep = e.Audit()
			require.Equal(t, int64(2), rep.Unadmits)
			require.Zero(t, rep.FalseAdmits+rep.FalseDenies, "%+v", rep)
		})
	}
}

// TestAuditReserveMatchesReference: random scripts of AllowAt, ReserveAt
// and Cancel (of any pending reservation, in any order), with drains at
// random points and the engine's clock following the script, against the
// test's exact model, which takes a cancelled reservation's units out of
// its log when Cancel reports it gave them back.
func TestAuditReserveMatchesReference(t *testing.T) {
	for _, alg := range allAlgorithms {
		for seed := int64(1); seed <= 15; seed++ {
			t.Run(fmt.Sprintf("alg=%v/seed=%d", alg, seed), func(t *testing.T) {
				clk := engine.NewManualClock(t0)
				cfg := engine.Config{Limit: 6, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, Clock: clk, DisableEviction: true}
				e := newEngine(t, cfg)
				ref := newModel(cfg)
				rng := rand.New(rand.NewSource(seed))
				type pending struct {
					r   *engine.Reservation
					key string
					ev  int // index in the model's log of the key
				}
				var held []pending
				now := t0
				for i := 0; i < 300; i++ {
					if rng.Intn(3) == 0 {
						now = now.Add(time.Duration(rng.Intn(150)) * time.Millisecond)
					}
					clk.Set(now)
					key := string(rune('a' + rng.Intn(2)))
					n := 1 + rng.Int63n(3)
					switch op := rng.Intn(10); {
					case op < 4:
						ref.observe(key, n, now, e.AllowAt(key, n, now))
					case op < 7:
						r := new(engine.Reservation)
						*r = e.ReserveAt(key, n, now) // built once, then used only through r
						ref.observe(key, n, now, r.Decision())
						if r.Decision().Allowed {
							held = append(held, pending{r, key, len(ref.keys[key].log) - 1})
						}
					case op < 9 && len(held) > 0:
						j := rng.Intn(len(held))
						p := held[j]
						held = append(held[:j], held[j+1:]...)
						if p.r.Cancel() {
							// The engine gave the units back; the log takes
							// them out unless they have left the exact window
							// at the key's newest time (the weighted counter
							// still counts part of that sub-window).
							ref.unadmit(p.key, p.ev, p.r.Units())
						}
					default:
						e.Audit()
					}
				}
				ref.checkAudit(t, e.Audit())
			})
		}
	}
}

// TestAuditReserveCancelConcurrent: goroutines reserve, cancel some of
// their reservations and decide, on sampled keys with a shared manual clock
// and concurrent Audit calls. Cancel can make the audit see false denies
// (an unadmit buffered before a decision the engine made earlier), never a
// false admit: for Strict and the log none may appear, and no window may
// hold more than the limit once cancellations are taken out.
func TestAuditReserveCancelConcurrent(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(t0)
			e := newEngine(t, engine.Config{Limit: 12, Window: 100 * time.Millisecond, SubWindows: 10, Algorithm: alg,
				Audit: 1, Clock: clk, DisableEviction: true, AuditBuffer: 1 << 16})
			var issued, cancels atomic.Int64
			stop := make(chan struct{})
			var aw sync.WaitGroup
			aw.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						e.Audit()
					}
				}
			})
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					rng := rand.New(rand.NewSource(int64(w) + 7))
					for i := range 2000 {
						if w == 0 && i%25 == 0 {
							clk.Advance(time.Duration(rng.Intn(12)) * time.Millisecond)
						}
						key := fmt.Sprint("k", rng.Intn(2))
						n := 1 + rng.Int63n(3)
						if rng.Intn(2) == 0 {
							e.AllowN(key, n)
							issued.Add(1)
							continue
						}
						r := e.Reserve(key, n)
						issued.Add(1)
						if rng.Intn(2) == 0 && r.Cancel() {
							cancels.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			aw.Wait()
			r := e.Audit()
			require.Zero(t, r.Dropped)
			require.Equal(t, issued.Load(), r.Decisions)
			require.Equal(t, cancels.Load(), r.Unadmits)
			require.Equal(t, r.Decisions, r.Judged+r.Unjudged)
			require.Zero(t, r.FalseAdmits, "%+v", r)
			require.LessOrEqual(t, r.WorstWindow, 1.0, "%+v", r)
			t.Logf("%+v", r)
		})
	}
}
