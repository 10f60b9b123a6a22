package engine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestReservationCopiesCancelOnce: however a Reservation is copied (an
// assignment, a range loop's variable, append, a channel), Cancel on the
// copies gives the units back once: the key's Remaining rises by n, not
// by n per copy. On the old code r2 := r; r.Cancel(); r2.Cancel() both
// returned true and freed 2n units, n of them other requests'.
func TestReservationCopiesCancelOnce(t *testing.T) {
	copiers := map[string]func(r engine.Reservation) []engine.Reservation{
		"assignment": func(r engine.Reservation) []engine.Reservation {
			r2 := r
			r3 := r2
			return []engine.Reservation{r, r2, r3}
		},
		"range": func(r engine.Reservation) []engine.Reservation {
			src := []engine.Reservation{r, r}
			out := make([]engine.Reservation, 0, 3)
			for i, c := range src { // c is a copy of src[i]
				if i == 0 {
					out = append(out, c, src[1])
				}
			}
			return append(out, src[0])
		},
		"append": func(r engine.Reservation) []engine.Reservation {
			s := append([]engine.Reservation(nil), r)
			s = append(s, s[0])
			grown := append(make([]engine.Reservation, 0, 1), s...) // moved into a new backing array
			return append(s, grown...)
		},
		"channel": func(r engine.Reservation) []engine.Reservation {
			ch := make(chan engine.Reservation, 2)
			ch <- r
			ch <- r
			return []engine.Reservation{r, <-ch, <-ch}
		},
	}
	for _, alg := range allAlgorithms {
		for name, copies := range copiers {
			t.Run(fmt.Sprintf("%v/%s", alg, name), func(t *testing.T) {
				e := newEngine(t, engine.Config{Limit: 10, Window: time.Second, Algorithm: alg, DisableEviction: true})
				if d := e.AllowAt("k", 4, t0); !d.Allowed { // another request's units
					t.Fatal(d)
				}
				r := e.ReserveAt("k", 3, t0)
				if !r.Decision().Allowed {
					t.Fatal(r.Decision())
				}
				cancelled := 0
				for _, c := range copies(r) {
					if c.Cancel() {
						cancelled++
					}
					again := c // a copy of a copy
					if again.Cancel() {
						cancelled++
					}
				}
				if got := e.AllowAt("k", 0, t0).Remaining; cancelled != 1 || got != 6 {
					t.Fatalf("%d copies' Cancel returned true, Remaining %d; want 1 and 6 (the 4 other units stay)", cancelled, got)
				}
			})
		}
	}
}

// TestReservationCopiesCancelOnceConcurrently: copies cancelled from many
// goroutines at once: exactly one returns true, and the count drops by n.
func TestReservationCopiesCancelOnceConcurrently(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 1000, Window: time.Second, Algorithm: alg, DisableEviction: true})
			for round := range 200 {
				r := e.ReserveAt("k", 5, t0)
				if !r.Decision().Allowed {
					t.Fatalf("round %d: %+v", round, r.Decision())
				}
				results := make(chan bool, 8)
				var wg sync.WaitGroup
				for range 8 {
					c := r
					wg.Go(func() { results <- c.Cancel() })
				}
				wg.Wait()
				close(results)
				won := 0
				for ok := range results {
					if ok {
						won++
					}
				}
				if got := e.AllowAt("k", 0, t0).Remaining; won != 1 || got != 1000 {
					t.Fatalf("round %d: %d cancels won, Remaining %d; want 1 and 1000", round, won, got)
				}
			}
		})
	}
}

// TestReserveStillAllocatesNothing: an admitted Reserve takes its claim
// from a chunk shared with 1,022 others, so a run of them allocates
// nothing per call (one 4 KiB chunk per 1,023 admissions).
func TestReserveStillAllocatesNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			limit := int64(engine.MaxLimit)
			if alg == engine.SlidingLog {
				limit = engine.DefaultMaxLogLimit
			}
			e := newEngine(t, engine.Config{Limit: limit, Window: time.Second, Algorithm: alg, DisableEviction: true})
			e.AllowAt("k", 1, t0)
			allocs := testing.AllocsPerRun(500, func() {
				r := e.ReserveAt("k", 1, t0)
				if !r.Cancel() {
					t.Fatal("cancel failed")
				}
			})
			if allocs != 0 {
				t.Fatalf("Reserve and Cancel allocate %v per call", allocs)
			}
		})
	}
}
