package httplimit_test

// The adversarial review of issue 31 (branch adv31): WithSettle, ReportCost
// and WithInFlight from their documentation only.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

func advEngine(t *testing.T, limit int64, alg engine.Algorithm) *engine.Engine {
	t.Helper()
	e, _ := adaptertest.NewEngine(t, engine.Config{Algorithm: alg}, limit)
	return e
}

func advDo(h http.Handler, remote string, mod func(*http.Request)) (w *httptest.ResponseRecorder, panicked any) {
	w = httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	if mod != nil {
		mod(r)
	}
	defer func() { panicked = recover() }()
	h.ServeHTTP(w, r)
	return w, nil
}

func remaining(e *engine.Engine, key string) int64 { return e.AllowN(key, 0).Remaining }

// ReportCost "reports the actual cost of the request whose context is ctx":
// a report made through a request's context after that request returned
// must not reach another request. Here request A keeps its context, returns,
// and reports 40 while request B (estimate 5, reporting nothing: "A handler
// that reports nothing keeps the estimate") runs; B must be settled at 5.
func TestAdv31StaleReportCostReachesNoOtherRequest(t *testing.T) {
	e := advEngine(t, 100, engine.SlidingWindowStrict)
	m, err := httplimit.NewMiddleware(e, httplimit.WithSettle(), httplimit.WithCost(func(*http.Request) int64 { return 5 }))
	if err != nil {
		t.Fatal(err)
	}
	var stale context.Context
	hA := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stale = r.Context()
		if err := httplimit.ReportCost(r.Context(), 5); err != nil {
			t.Error(err)
		}
	}))
	advDo(hA, "192.0.2.1:1", nil)
	if got := remaining(e, "192.0.2.1"); got != 95 {
		t.Fatalf("A: remaining %d, want 95", got)
	}
	for i := range 50 { // B, many times, so that a pooled state is reused
		hB := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = httplimit.ReportCost(stale, 40) // A's context, after A returned
		}))
		before := remaining(e, "192.0.2.2")
		advDo(hB, "192.0.2.2:1", nil)
		if got := remaining(e, "192.0.2.2"); got != before-5 {
			t.Fatalf("B %d: remaining %d, want %d: A's late report settled B", i, got, before-5)
		}
		if i == 15 {
			break
		}
	}
	if got := remaining(e, "192.0.2.1"); got != 95 {
		t.Fatalf("A after its late report: remaining %d, want 95 (settled once)", got)
	}
}

// Nested middlewares with WithSettle: ReportCost reports "to the middlewares
// with WithSettle around the handler", every one of them.
func TestAdv31ReportCostReachesEveryNestedSettle(t *testing.T) {
	a := advEngine(t, 100, engine.SlidingWindowStrict)
	b := advEngine(t, 100, engine.SlidingWindowStrict)
	outer, err := httplimit.NewMiddleware(a, httplimit.WithSettle(), httplimit.WithPolicy("a", 0), httplimit.WithCost(func(*http.Request) int64 { return 10 }))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := httplimit.NewMiddleware(b, httplimit.WithSettle(), httplimit.WithPolicy("b", 0), httplimit.WithCost(func(*http.Request) int64 { return 20 }))
	if err != nil {
		t.Fatal(err)
	}
	h := outer.Handler(inner.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := httplimit.ReportCost(r.Context(), 33); err != nil {
			t.Error(err)
		}
	})))
	w, _ := advDo(h, "192.0.2.1:1", nil)
	if w.Code != 200 {
		t.Fatal(w.Code)
	}
	if ga, gb := remaining(a, "192.0.2.1"), remaining(b, "192.0.2.1"); ga != 67 || gb != 67 {
		t.Fatalf("remaining a %d, b %d; want 67 and 67", ga, gb)
	}
}

// "The rate-limit fields ... carry the reservation's values (the estimate's
// Remaining), and the settle's effect shows in the next response's fields."
func TestAdv31SettleHeaders(t *testing.T) {
	e := advEngine(t, 100, engine.SlidingWindowStrict)
	m, err := httplimit.NewMiddleware(e, httplimit.WithSettle(), httplimit.WithCost(func(*http.Request) int64 { return 30 }),
		httplimit.WithHeaders(httplimit.HeadersDraft|httplimit.HeadersLegacy))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = httplimit.ReportCost(r.Context(), 5)
		w.WriteHeader(200)
		_ = httplimit.ReportCost(r.Context(), 45)
	}))
	w, _ := advDo(h, "192.0.2.1:1", nil)
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "70" {
		t.Fatalf("first: X-RateLimit-Remaining %q, want 70", got)
	}
	if got := remaining(e, "192.0.2.1"); got != 55 {
		t.Fatalf("settled to the last report: remaining %d, want 55", got)
	}
	w, _ = advDo(h, "192.0.2.1:1", nil)
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "25" {
		t.Fatalf("second: X-RateLimit-Remaining %q, want 25", got)
	}
}

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

// advReserving is a ReservingLimiter over an engine that counts the settles
// of each reservation: the middleware "calls it at most once".
type advReserving struct {
	e       *engine.Engine
	mu      sync.Mutex
	settles []int // per reservation
	actual  []int64
	refuse  bool
}

func (l *advReserving) AllowN(_ context.Context, key string, n int64) (engine.Decision, error) {
	return l.e.AllowN(key, n), nil
}

func (l *advReserving) ReserveN(_ context.Context, key string, n int64) (engine.Decision, httplimit.SettleFunc, error) {
	if l.refuse {
		return engine.Decision{Limit: 5, Remaining: 0, RetryAfter: time.Second}, nil, nil
	}
	r := l.e.Reserve(key, n)
	if !r.Decision().Allowed {
		return r.Decision(), nil, nil
	}
	l.mu.Lock()
	i := len(l.settles)
	l.settles = append(l.settles, 0)
	l.actual = append(l.actual, -1)
	l.mu.Unlock()
	return r.Decision(), func(ctx context.Context, actual int64) (engine.Decision, error) {
		l.mu.Lock()
		l.settles[i]++
		l.actual[i] = actual
		l.mu.Unlock()
		if actual == 0 {
			r.Cancel()
			return r.Decision(), nil
		}
		return r.Settle(actual)
	}, nil
}

// NewMulti: "A request that one policy refuses holds nothing of the others
// (all or nothing, as above; a shared limiter that can hold units, a
// ReservingLimiter, gives back what it admitted)". Mixed engines and shared
// limiters, in flight and settled, in both orders.
func TestAdv31MultiRefusalHoldsNothing(t *testing.T) {
	for _, c := range []struct {
		name              string
		sharedFirst       bool
		inFlight, settled bool
	}{
		{"shared in flight, then engine refuses", true, true, false},
		{"shared settled, then engine refuses", true, false, true},
		{"engine in flight, then shared refuses", false, true, false},
		{"engine settled, then shared refuses", false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			se := advEngine(t, 5, engine.SlidingWindowStrict)
			shared := &advReserving{e: se}
			local := advEngine(t, 5, engine.SlidingWindowStrict)
			sp := httplimit.Policy{Name: "shared", Limiter: shared, InFlight: c.inFlight, Settle: c.settled}
			lp := httplimit.Policy{Name: "local", Limiter: local, InFlight: c.inFlight, Settle: c.settled}
			var ps []httplimit.Policy
			if c.sharedFirst {
				local.AllowN("192.0.2.1", 5) // the engine refuses
				ps = []httplimit.Policy{sp, lp}
			} else {
				shared.refuse = true
				ps = []httplimit.Policy{lp, sp}
			}
			m, err := httplimit.NewMulti(ps)
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			w, _ := advDo(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })), "192.0.2.1:1", nil)
			if w.Code != http.StatusTooManyRequests || ran {
				t.Fatalf("status %d, ran %v", w.Code, ran)
			}
			if c.sharedFirst {
				if got := remaining(se, "192.0.2.1"); got != 5 {
					t.Fatalf("the shared limiter holds %d units after the refusal", 5-got)
				}
				shared.mu.Lock()
				defer shared.mu.Unlock()
				for i, n := range shared.settles {
					if n != 1 || shared.actual[i] != 0 {
						t.Fatalf("reservation %d settled %d times, last to %d; want once, to 0", i, n, shared.actual[i])
					}
				}
			} else if got := remaining(local, "192.0.2.1"); got != 5 {
				t.Fatalf("the engine holds %d units after the refusal", 5-got)
			}
		})
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

// ReportCost "is safe to call from any goroutine": reports racing the
// handler's return and the settle (run under -race), and the settle takes
// one of the reported costs, each a whole report.
func TestAdv31ReportCostRacingTheSettle(t *testing.T) {
	e := advEngine(t, 1_000_000, engine.SlidingWindowStrict)
	m, err := httplimit.NewMiddleware(e, httplimit.WithSettle(), httplimit.WithCost(func(*http.Request) int64 { return 7 }))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		wg.Add(2)
		for range 2 {
			go func() {
				defer wg.Done()
				for range 100 {
					_ = httplimit.ReportCost(ctx, 100)
				}
			}()
		}
		runtime.Gosched()
	}))
	for i := range 200 {
		key := "192.0.2." + string(rune('0'+i%10)) + ":1"
		before := remaining(e, key[:len(key)-2])
		advDo(h, key, nil)
		got := before - remaining(e, key[:len(key)-2])
		if got != 7 && got != 100 {
			t.Fatalf("request %d settled to %d, neither the estimate nor a report", i, got)
		}
	}
	wg.Wait()
}

// "a report allocates nothing", also a refused one without a settling
// middleware? (only the report into a settling middleware is checked).
func TestAdv31ReportCostAllocatesNothing(t *testing.T) {
	e := advEngine(t, 1_000_000, engine.SlidingWindowStrict)
	m, err := httplimit.NewMiddleware(e, httplimit.WithSettle())
	if err != nil {
		t.Fatal(err)
	}
	var allocs float64
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		n := int64(0)
		allocs = testing.AllocsPerRun(100, func() {
			n++
			_ = httplimit.ReportCost(ctx, n)
		})
	}))
	advDo(h, "192.0.2.1:1", nil)
	if allocs != 0 {
		t.Fatalf("ReportCost allocates %v per report", allocs)
	}
}

// BREAK (false admission, by design choice?): WithSettle promises "more
// [units] are charged past the limit, a debt that later requests wait out",
// and semantics.md "Later requests are refused until enough of the window,
// the debt included, has left it". A request whose estimate is 0 is
// reserved "as AllowN would decide it", and AllowN admits n = 0 always, so
// requests estimated at 0 never wait a debt out: each is served and
// charged afterwards, and a key can run up any debt (here 5 requests of 500
// tokens each against a limit of 100 tokens per window, all served). An
// estimator that returns 0 for a request it cannot size (no max_tokens)
// turns the tokens-per-minute limit off for that key. The second request,
// made while the key owes 400 tokens, should be refused with 429.
func TestAdv31ZeroEstimateNeverWaitsOutADebt(t *testing.T) {
	e := advEngine(t, 100, engine.SlidingWindowStrict)
	m, err := httplimit.NewMiddleware(e, httplimit.WithSettle(), httplimit.WithCost(func(*http.Request) int64 { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		_ = httplimit.ReportCost(r.Context(), 500)
	}))
	codes := []int{}
	for range 5 {
		w, _ := advDo(h, "192.0.2.1:1", nil)
		codes = append(codes, w.Code)
	}
	if d := e.AllowN("192.0.2.1", 1); d.Allowed {
		t.Fatalf("the key is not in debt: %+v", d)
	}
	if served > 1 {
		t.Fatalf("%d requests served while the key was in debt past its limit (statuses %v); the key owes %d units against a limit of 100",
			served, codes, 500*served-100)
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

// NewMulti's twin of TestAdv31ZeroEstimateNeverWaitsOutADebt: a settled
// policy whose Cost is 0 (Policy.Cost) beside a requests-per-minute policy.
// BREAK (false admission) as there: the tokens policy never refuses.
func TestAdv31ZeroEstimateMulti(t *testing.T) {
	rpm := advEngine(t, 1000, engine.SlidingWindowStrict)
	tpm := advEngine(t, 100, engine.SlidingWindowStrict)
	m, err := httplimit.NewMulti([]httplimit.Policy{
		{Name: "rpm", Limiter: rpm},
		{Name: "tpm", Limiter: tpm, Settle: true, Cost: func(*http.Request) int64 { return 0 }},
	})
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		_ = httplimit.ReportCost(r.Context(), 500)
	}))
	for range 5 {
		advDo(h, "192.0.2.1:1", nil)
	}
	if got := remaining(tpm, "192.0.2.1"); got != 0 {
		t.Fatalf("tpm not in debt: %d", got)
	}
	if served > 1 {
		t.Fatalf("%d requests served while tpm was in debt past its limit", served)
	}
}

// BREAK (wrong count, minor): Stats.SettleErrors "counts the requests whose
// held units ... the limiter would not give back or settle" (httplimit;
// grpclimit's doc says "one per policy", httplimit's does not): one request whose two settled policies both refuse the report
// counts once, and every other counter counts it once ("it never counts
// one twice").
func TestAdv31SettleErrorsCountRequests(t *testing.T) {
	a := advEngine(t, 100, engine.SlidingWindowStrict)
	b := advEngine(t, 100, engine.SlidingWindowStrict)
	m, err := httplimit.NewMulti([]httplimit.Policy{
		{Name: "a", Limiter: a, Settle: true},
		{Name: "b", Limiter: b, Settle: true},
	}, httplimit.WithCost(func(*http.Request) int64 { return 5 }))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = httplimit.ReportCost(r.Context(), 1<<41)
	}))
	advDo(h, "192.0.2.1:1", nil)
	if s := m.Stats(); s.SettleErrors != 1 || s.Allowed != 1 {
		t.Fatalf("Stats %+v: want SettleErrors 1 (one request), Allowed 1", s)
	}
	if ga, gb := remaining(a, "192.0.2.1"), remaining(b, "192.0.2.1"); ga != 95 || gb != 95 {
		t.Fatalf("the estimate stays: a %d, b %d", ga, gb)
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

// A refused request holds nothing and runs no handler: a deny handler (or a
// refusal handler) that calls ReportCost charges nothing.
func TestAdv31ReportCostFromARefusal(t *testing.T) {
	e := advEngine(t, 10, engine.SlidingWindowStrict)
	var reportErr error
	m, err := httplimit.NewMiddleware(e, httplimit.WithSettle(), httplimit.WithCost(func(*http.Request) int64 { return 6 }),
		httplimit.WithDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reportErr = httplimit.ReportCost(r.Context(), 50)
		})))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	advDo(h, "192.0.2.1:1", nil)
	w, _ := advDo(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatal(w.Code)
	}
	if got := remaining(e, "192.0.2.1"); got != 4 {
		t.Fatalf("remaining %d, want 4: the refusal's report was charged (ReportCost said %v)", got, reportErr)
	}
	t.Logf("ReportCost in a deny handler: %v", reportErr)
}

// BREAK (wrong header, minor; arguable): Middleware's doc promises that t=
// on an admitted response "is a true upper bound on when the key's whole
// quota is free again without further traffic". Under WithSettle the fields
// "carry the reservation's values", but a handler that takes longer than a
// sub-window and reports more than its estimate adds a debt at the settle's
// time, which outlives the t= sent: here t=11 (Window 10 s plus a 1 s
// sub-window), and 11 s after the response the key still owes 50 units of
// its 100. Either t= should count the debt's possible lateness (it cannot:
// it is sent first) or the doc should say that t= too is the reservation's
// and a larger report can push the quota's freedom later.
func TestAdv31SettleTEqualsIsNotAnUpperBound(t *testing.T) {
	e, clk := adaptertest.NewEngine(t, engine.Config{Algorithm: engine.SlidingWindowStrict, SubWindows: 10}, 100)
	m, err := httplimit.NewMiddleware(e, httplimit.WithSettle(), httplimit.WithCost(func(*http.Request) int64 { return 10 }))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)           // the fields go out with the header
		clk.Advance(5 * time.Second) // the model answers 5 s later
		_ = httplimit.ReportCost(r.Context(), 60)
	}))
	w, _ := advDo(h, "192.0.2.1:1", nil)
	members, err := adaptertest.ParseList(w.Header().Values("RateLimit"))
	if err != nil || len(members) != 1 {
		t.Fatalf("RateLimit %q: %v", w.Header().Values("RateLimit"), err)
	}
	tEq := members[0].Params["t"]
	if tEq != 11 {
		t.Fatalf("t=%d, want 11", tEq)
	}
	clk.Advance(time.Duration(tEq)*time.Second - 5*time.Second) // t= seconds after the response's header
	if got := remaining(e, "192.0.2.1"); got != 100 {
		t.Fatalf("t=%d after the response, the key's quota is not free: remaining %d of 100", tEq, got)
	}
}

// A later policy's limiter panics (an engine Config.KeyLimit that panics):
// engine.AllowAll, which NewMulti's all-or-nothing is built on, promises
// "If a request panics (a Config.KeyLimit that panics), the requests
// reserved before it are cancelled as the panic unwinds: the panic goes
// on, and nothing is consumed". The units an earlier policy holds for the
// request (in flight, settled, or a plain rate) must not outlive the panic.
func TestAdv31MultiPanicInALaterPolicy(t *testing.T) {
	for _, c := range []struct {
		name              string
		inFlight, settled bool
	}{{"rate", false, false}, {"in flight", true, false}, {"settled", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			first := advEngine(t, 5, engine.SlidingWindowStrict)
			boom, err := engine.New(engine.Config{Limit: 5, Window: 10 * time.Second, Algorithm: engine.SlidingWindowStrict,
				KeyLimit: func(string) int64 { panic("KeyLimit") }})
			if err != nil {
				t.Fatal(err)
			}
			defer boom.Close()
			m, err := httplimit.NewMulti([]httplimit.Policy{
				{Name: "first", Limiter: first, InFlight: c.inFlight, Settle: c.settled},
				{Name: "boom", Limiter: boom},
			})
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			_, p := advDo(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })), "192.0.2.1:1", nil)
			if p == nil || ran {
				t.Fatalf("panic %v, handler ran %v", p, ran)
			}
			if got := remaining(first, "192.0.2.1"); got != 5 {
				t.Fatalf("the first policy keeps %d units after the panic", 5-got)
			}
		})
	}
}

type advPanicking struct{ advReserving }

func (l *advPanicking) ReserveN(context.Context, string, int64) (engine.Decision, httplimit.SettleFunc, error) {
	panic("backend bug")
}

// BREAK (in-flight leak, low: needs a limiter that panics): the same as
// TestAdv31MultiPanicInALaterPolicy with a shared limiter (a
// ReservingLimiter) that panics after an engine policy reserved its unit in
// flight: NewMulti's ordered path. WithInFlight gives units back "when the
// handler returns, normally or by a panic", and NewMulti promises "A request
// that one policy refuses holds nothing of the others"; the all-engine
// path cancels on a KeyLimit's panic (engine.AllowAll's promise, held
// above), but here the engine's unit stays held until the lease ends: a
// tenant limited to 5 in flight runs 4 after one such panic, 0 after five.
func TestAdv31MultiPanicInASharedPolicy(t *testing.T) {
	first := advEngine(t, 5, engine.SlidingWindowStrict)
	bad := &advPanicking{advReserving{e: advEngine(t, 5, engine.SlidingWindowStrict)}}
	m, err := httplimit.NewMulti([]httplimit.Policy{
		{Name: "first", Limiter: first, InFlight: true},
		{Name: "bad", Limiter: bad, InFlight: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, p := advDo(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), "192.0.2.1:1", nil)
	if p == nil {
		t.Fatal("no panic")
	}
	if got := remaining(first, "192.0.2.1"); got != 5 {
		t.Fatalf("the engine policy keeps %d units in flight after the panic", 5-got)
	}
}

// A later policy's Key or Cost function panics (a bug in the server's own
// code) after an earlier policy could have reserved: the earlier policy's
// in-flight unit must not stay held, on the all-engine path and on the
// ordered one (a shared limiter first).
func TestAdv31MultiKeyOrCostPanics(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		for _, what := range []string{"key", "cost"} {
			first := advEngine(t, 5, engine.SlidingWindowStrict)
			var firstLimiter any = first
			var shared *advReserving
			if ordered {
				shared = &advReserving{e: first}
				firstLimiter = shared
			}
			second := httplimit.Policy{Name: "second", Limiter: advEngine(t, 5, engine.SlidingWindowStrict)}
			if what == "key" {
				second.Key = httplimit.KeyFunc(func(*http.Request) (string, error) { panic("key") })
			} else {
				second.Cost = func(*http.Request) int64 { panic("cost") }
			}
			m, err := httplimit.NewMulti([]httplimit.Policy{{Name: "first", Limiter: firstLimiter, InFlight: true}, second})
			if err != nil {
				t.Fatal(err)
			}
			_, p := advDo(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), "192.0.2.1:1", nil)
			if p == nil {
				t.Fatalf("ordered %v, %s: no panic", ordered, what)
			}
			if got := remaining(first, "192.0.2.1"); got != 5 {
				t.Errorf("ordered %v, a %s function's panic: the first policy keeps %d units in flight", ordered, what, 5-got)
			}
		}
	}
}

// advSettlePanics is a ReservingLimiter whose SettleFunc panics.
type advSettlePanics struct{ advReserving }

func (l *advSettlePanics) ReserveN(ctx context.Context, key string, n int64) (engine.Decision, httplimit.SettleFunc, error) {
	d, _, err := l.advReserving.ReserveN(ctx, key, n)
	return d, func(context.Context, int64) (engine.Decision, error) { panic("settle bug") }, err
}

// BREAK (in-flight leak, low: needs a SettleFunc that panics): after the
// handler, a shared limiter's SettleFunc that panics stops the settles of
// the policies after it, so an engine policy in flight after it keeps its
// unit for the whole lease (before it, the unit is given back). Same class
// as TestAdv31MultiPanicInASharedPolicy: WithInFlight's units go back "when
// the handler returns, normally or by a panic", whoever panics.
func TestAdv31MultiSettleFuncPanics(t *testing.T) {
	for _, sharedFirst := range []bool{true, false} {
		eng := advEngine(t, 5, engine.SlidingWindowStrict)
		bad := &advSettlePanics{advReserving{e: advEngine(t, 5, engine.SlidingWindowStrict)}}
		ps := []httplimit.Policy{{Name: "shared", Limiter: bad, InFlight: true}, {Name: "engine", Limiter: eng, InFlight: true}}
		if !sharedFirst {
			ps[0], ps[1] = ps[1], ps[0]
		}
		m, err := httplimit.NewMulti(ps)
		if err != nil {
			t.Fatal(err)
		}
		_, p := advDo(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), "192.0.2.1:1", nil)
		t.Logf("shared first %v: panic %v", sharedFirst, p)
		if got := remaining(eng, "192.0.2.1"); got != 5 {
			t.Errorf("shared first %v: the engine policy keeps %d units in flight after the shared settle panicked", sharedFirst, 5-got)
		}
	}
}

// advFailing is a ReservingLimiter that fails: open (Allowed with the
// error) or closed, or with the caller's context error when it is done.
type advFailing struct {
	advReserving
	open bool
}

func (l *advFailing) ReserveN(ctx context.Context, key string, n int64) (engine.Decision, httplimit.SettleFunc, error) {
	if ctx.Err() != nil {
		return engine.Decision{Allowed: l.open, Limit: 5}, nil, ctx.Err()
	}
	return engine.Decision{Allowed: l.open, Limit: 5, RetryAfter: time.Second}, nil, adaptertest.ErrBackend
}

// A later shared policy fails (fail-closed: 503; or the caller left: 503,
// Canceled; or fail-open: served) after an engine policy reserved its unit
// in flight. Refused requests "hold nothing of the others"; a served one
// gives its unit back when the handler returns.
func TestAdv31MultiSharedFailureAfterInFlight(t *testing.T) {
	for _, c := range []struct {
		name string
		open bool
		done bool
	}{{"fail closed", false, false}, {"fail open", true, false}, {"caller gone", true, true}, {"caller gone, closed", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			eng := advEngine(t, 5, engine.SlidingWindowStrict)
			bad := &advFailing{advReserving: advReserving{e: advEngine(t, 5, engine.SlidingWindowStrict)}, open: c.open}
			m, err := httplimit.NewMulti([]httplimit.Policy{{Name: "engine", Limiter: eng, InFlight: true}, {Name: "shared", Limiter: bad, InFlight: true}})
			if err != nil {
				t.Fatal(err)
			}
			w, _ := advDo(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), "192.0.2.1:1", func(r *http.Request) {
				if c.done {
					ctx, cancel := context.WithCancel(r.Context())
					cancel()
					*r = *r.WithContext(ctx)
				}
			})
			t.Logf("status %d, stats %+v", w.Code, m.Stats())
			if got := remaining(eng, "192.0.2.1"); got != 5 {
				t.Fatalf("the engine policy keeps %d units in flight", 5-got)
			}
		})
	}
}
