package httplimit_test

// The adversarial review of issue 31 (branch adv31): WithSettle, ReportCost
// and WithInFlight from their documentation only.

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
)

// WithInFlight: Limit is "the most units ... running at once per key",
// with handlers that return, panic (also http.ErrAbortHandler) or exit
// their goroutine (runtime.Goexit); afterwards every unit is back.
func TestAdv31InFlightNeverPassesTheLimitNorLeaks(t *testing.T) {
	const limit = 3
	e := advEngine(t, limit, engine.SlidingWindowStrict)
	m, err := httplimit.NewMiddleware(e, httplimit.WithInFlight())
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
					advDo(h, "192.0.2.1:1", func(r *http.Request) { r.Header.Set("X-Mode", mode) })
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
	if got := remaining(e, "192.0.2.1"); got != limit {
		t.Fatalf("after every request returned: remaining %d, want %d (a unit leaked, or was returned twice)", got, limit)
	}
}

// A hijack that fails (the writer cannot hijack: HTTP/2, a recorder) leaves
// the request an ordinary one: WithInFlight "gives it back when the handler
// returns"; only "a request whose connection the handler hijacked" keeps
// its units until the lease ends.
func TestAdv31FailedHijackGivesBack(t *testing.T) {
	e := advEngine(t, 1, engine.SlidingWindowStrict)
	m, err := httplimit.NewMiddleware(e, httplimit.WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"controller", "assert"} {
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var err error
			if how == "controller" {
				_, _, err = http.NewResponseController(w).Hijack()
			} else if hj, ok := w.(http.Hijacker); ok {
				_, _, err = hj.Hijack()
			} else {
				return
			}
			if err == nil {
				t.Error("a recorder hijacked")
			}
			w.WriteHeader(http.StatusAccepted)
		}))
		w, _ := advDo(h, "192.0.2.1:1", nil)
		if w.Code != http.StatusAccepted {
			t.Fatalf("%s: status %d", how, w.Code)
		}
		if got := remaining(e, "192.0.2.1"); got != 1 {
			t.Fatalf("%s: after a failed hijack the unit is held: remaining %d, want 1", how, got)
		}
	}
}

// The same over a real HTTP/2 server, where Hijack is not supported.
func TestAdv31FailedHijackHTTP2(t *testing.T) {
	e := advEngine(t, 1, engine.SlidingWindowStrict)
	m, err := httplimit.NewMiddleware(e, httplimit.WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := http.NewResponseController(w).Hijack(); err == nil {
			t.Error("HTTP/2 hijacked")
		}
		w.WriteHeader(http.StatusAccepted)
	})))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	for i := range 3 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Skip("no HTTP/2")
		}
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("request %d: status %d (the failed hijack kept the unit)", i, resp.StatusCode)
		}
	}
}

// "A FixedWindow engine is refused" for requests in flight: through
// Policy.InFlight and through WithInFlight on NewMulti too.
func TestAdv31InFlightFixedRefusedInMulti(t *testing.T) {
	fixed := advEngine(t, 5, engine.FixedWindow)
	other := advEngine(t, 5, engine.SlidingWindowStrict)
	if _, err := httplimit.NewMulti([]httplimit.Policy{{Name: "a", Limiter: other}, {Name: "b", Limiter: fixed, InFlight: true}}); err == nil {
		t.Error("Policy.InFlight on a FixedWindow engine is accepted")
	}
	if _, err := httplimit.NewMulti([]httplimit.Policy{{Name: "a", Limiter: other}, {Name: "b", Limiter: fixed}}, httplimit.WithInFlight()); err == nil {
		t.Error("WithInFlight on NewMulti with a FixedWindow engine is accepted")
	}
	// a settled FixedWindow policy is fine: a settle is not a lease
	if _, err := httplimit.NewMulti([]httplimit.Policy{{Name: "b", Limiter: fixed, Settle: true}}); err != nil {
		t.Errorf("Policy.Settle on FixedWindow: %v", err)
	}
}

// NewMulti under concurrency: a per-IP rate beside a per-tenant limit in
// flight. Never more than the in-flight limit run at once; afterwards the
// tenant holds nothing, and the rate was charged exactly once per request
// served ("a request that one policy refuses charges none of the others").
func TestAdv31MultiInFlightConcurrent(t *testing.T) {
	const inflight = 3
	rate := advEngine(t, 1_000_000, engine.SlidingWindowStrict)
	conc := advEngine(t, inflight, engine.SlidingWindowStrict)
	m, err := httplimit.NewMulti([]httplimit.Policy{
		{Name: "rate", Limiter: rate},
		{Name: "conc", Limiter: conc, Key: httplimit.KeyFunc(func(*http.Request) (string, error) { return "tenant", nil }), InFlight: true},
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
				w, _ := advDo(h, "192.0.2.1:1", func(r *http.Request) {
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
	if got := remaining(conc, "tenant"); got != inflight {
		t.Fatalf("tenant holds %d units after every request returned", inflight-got)
	}
	if got := 1_000_000 - remaining(rate, "192.0.2.1"); got != served.Load() {
		t.Fatalf("rate charged %d units for %d requests served (%d refused)", got, served.Load(), refused.Load())
	}
	if refused.Load() == 0 {
		t.Log("no refusal happened; the race was not exercised")
	}
}
