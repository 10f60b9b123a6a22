package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func TestReview4Allocs(t *testing.T) {
	if raceOn13 {
		t.Skip("race")
	}
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		e := new13(t, engine.Config{Limit: 1000, Window: time.Second, Algorithm: alg, DisableEviction: true, PerKeyLimits: true})
		f := new13(t, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: alg, DisableEviction: true})
		now := t13
		e.AllowAt("k", 1, now)
		f.AllowAt("k", 1, now)
		key := string([]byte("k"))
		cases := map[string]func(){
			"reserve+cancel": func() {
				r := e.ReserveAt(key, 1, now)
				r.Cancel()
			},
			"reserve+cancel after moving on": func() {
				r := e.ReserveAt(key, 1, now)
				now = now.Add(150 * time.Millisecond)
				e.AllowAt(key, 1, now)
				r.Cancel()
			},
			"allowall": func() {
				engine.AllowAll(now, engine.Request{Engine: e, Key: key, N: 1}, engine.Request{Engine: f, Key: key, N: 1})
			},
			"allowall denied": func() {
				engine.AllowAll(now, engine.Request{Engine: e, Key: key, N: 1}, engine.Request{Engine: f, Key: key, N: 5000})
			},
			"reserve denied": func() {
				r := e.ReserveAt(key, 5000, now)
				r.Cancel()
			},
		}
		for name, fn := range cases {
			fn()
			if a := testing.AllocsPerRun(200, fn); a != 0 {
				t.Errorf("%v %s: %v allocs", alg, name, a)
			}
		}
		if alg == engine.SlidingLog {
			// cancel after growth
			e.AllowAt("g", 1, now)
			r0 := e.ReserveAt("g", 1, now)
			if err := e.SetLimitAt("g", 5000, now); err != nil {
				t.Fatal(err)
			}
			if !r0.Cancel() {
				t.Error("cancel after grow false")
			}
			a := testing.AllocsPerRun(50, func() {
				r := e.ReserveAt("g", 1, now)
				r.Cancel()
			})
			if a != 0 {
				t.Errorf("log grown: %v", a)
			}
		}
	}
}

// Decision/At/Units/Key concurrent with Cancel on one Reservation.
func TestReview4ReservationConcurrentReads(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingLog} {
		e := new13(t, engine.Config{Limit: 100, Window: time.Second, Algorithm: alg, DisableEviction: true})
		for i := 0; i < 200; i++ {
			r := e.ReserveAt("k", 1, t13)
			var wg sync.WaitGroup
			var wins [4]bool
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					_ = r.Decision()
					_ = r.At()
					_ = r.Units()
					_ = r.Key()
					wins[g] = r.Cancel()
				}(g)
			}
			wg.Wait()
			n := 0
			for _, w := range wins {
				if w {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d wins", n)
			}
		}
		if rem := e.AllowAt("k", 0, t13).Remaining; rem != 100 {
			t.Fatalf("remaining %d", rem)
		}
	}
}
