package httplimit

// Requests in flight under concurrency: never past the limit, nothing
// leaked once they return.

import (
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

// WithInFlight: Limit is "the most units ... running at once per key",
// with handlers that return, panic (also http.ErrAbortHandler) or exit
// their goroutine (runtime.Goexit); afterwards every unit is back.
func TestInFlightConcurrentNeverPassesTheLimit(t *testing.T) {
	const limit = 3
	e := limitEngine(t, limit, engine.SlidingWindowStrict)
	m, err := NewMiddleware(e, WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	var running, most atomic.Int64
	var served atomic.Int64
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		for {
			o := most.Load()
			if n <= o || most.CompareAndSwap(o, n) {
				break
			}
		}
		for range 20 {
			runtime.Gosched()
		}
		running.Add(-1)
		served.Add(1)
		switch r.Header.Get("X-Mode") {
		case "panic":
			panic("handler")
		case "abort":
			panic(http.ErrAbortHandler)
		case "goexit":
			runtime.Goexit()
		}
	}))
	modes := []string{"", "panic", "abort", "goexit"}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				mode := modes[(g+i)%len(modes)]
				done := make(chan struct{})
				go func() {
					defer close(done)
					doCatch(h, "192.0.2.1:1", func(r *http.Request) { r.Header.Set("X-Mode", mode) })
				}()
				<-done
			}
		}()
	}
	wg.Wait()
	if most.Load() > limit {
		t.Fatalf("%d handlers ran at once, limit %d", most.Load(), limit)
	}
	if served.Load() == 0 {
		t.Fatal("nothing served")
	}
	if got := remainingOf(e, "192.0.2.1"); got != limit {
		t.Fatalf("after every request returned: remainingOf %d, want %d (a unit leaked, or was returned twice)", got, limit)
	}
}

// NewMulti under concurrency: a per-IP rate beside a per-tenant limit in
// flight. Never more than the in-flight limit run at once; afterwards the
// tenant holds nothing, and the rate was charged exactly once per request
// served ("a request that one policy refuses charges none of the others").
func TestInFlightMultiConcurrent(t *testing.T) {
	const inflight = 3
	rate := limitEngine(t, 1_000_000, engine.SlidingWindowStrict)
	conc := limitEngine(t, inflight, engine.SlidingWindowStrict)
	m, err := NewMulti([]Policy{
		{Name: "rate", Limiter: rate},
		{Name: "conc", Limiter: conc, Key: KeyFunc(func(*http.Request) (string, error) { return "tenant", nil }), InFlight: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	var running, most, served, refused atomic.Int64
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		for {
			o := most.Load()
			if n <= o || most.CompareAndSwap(o, n) {
				break
			}
		}
		for range 10 {
			runtime.Gosched()
		}
		running.Add(-1)
		served.Add(1)
		if r.Header.Get("X-Panic") != "" {
			panic("x")
		}
	}))
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				w, _ := doCatch(h, "192.0.2.1:1", func(r *http.Request) {
					if (g+i)%5 == 0 {
						r.Header.Set("X-Panic", "1")
					}
				})
				if w.Code == http.StatusTooManyRequests {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if most.Load() > inflight {
		t.Fatalf("%d ran at once, in-flight limit %d", most.Load(), inflight)
	}
	if got := remainingOf(conc, "tenant"); got != inflight {
		t.Fatalf("tenant holds %d units after every request returned", inflight-got)
	}
	if got := 1_000_000 - remainingOf(rate, "192.0.2.1"); got != served.Load() {
		t.Fatalf("rate charged %d units for %d requests served (%d refused)", got, served.Load(), refused.Load())
	}
	if refused.Load() == 0 {
		t.Log("no refusal happened; the race was not exercised")
	}
}
