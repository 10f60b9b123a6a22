package httplimit

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// reporting is a handler that reports the costs in the X-Report header
// (comma-separated; "panic" panics there) and answers "ok".
func reporting(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, v := range r.Header.Values("X-Report") {
			if v == "panic" {
				panic("boom")
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			if err := ReportCost(r.Context(), n); err != nil && n >= 0 {
				t.Errorf("ReportCost(%d): %v", n, err)
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
}

// withReports sets the costs the reporting handler reports.
func withReports(vs ...string) func(*http.Request) {
	return func(r *http.Request) {
		for _, v := range vs {
			r.Header.Add("X-Report", v)
		}
	}
}

// tokens is an estimate of 30 units per request.
func tokens(*http.Request) int64 { return 30 }

// serveRecover serves one request, recovering the handler's panic.
func serveRecover(h http.Handler, mod func(*http.Request)) (w *httptest.ResponseRecorder, panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	return do(h, "192.0.2.1:1", mod), false
}

// The estimate is reserved before the handler and settled to the reported
// cost after it: fewer units go back, more are a debt past the limit,
// nothing reported keeps the estimate, the last of two reports wins, a
// negative one is refused and changes nothing. The headers carry the
// reservation's values.
func TestSettleToTheReportedCost(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			e, clk := newEngine(t, engine.Config{Limit: 200, Algorithm: alg})
			m := mustMiddleware(t, e, WithCost(tokens), WithSettle())
			h := m.Handler(reporting(t))
			left := func() int64 { return e.AllowN("192.0.2.1", 0).Remaining }
			for i, c := range []struct {
				reports []string
				want    int64 // remaining after the settle
			}{
				{[]string{"10"}, 190},       // 20 go back
				{nil, 160},                  // the estimate stays
				{[]string{"30"}, 130},       // as estimated
				{[]string{"50", "5"}, 125},  // the last report wins
				{[]string{"-4", "20"}, 105}, // a negative report changes nothing
				{[]string{"-4"}, 75},        // … also alone: the estimate stays
				{[]string{"100"}, 0},        // 75 left, 100 used: a debt of 25
			} {
				before := left()
				w := do(h, "192.0.2.1:1", withReports(c.reports...))
				if w.Code != http.StatusOK {
					t.Fatalf("step %d: %d", i, w.Code)
				}
				// The fields are the reservation's: before the settle.
				checkMembers(t, w.Header(), []string{"default"}, []int64{200}, []int64{before - 30})
				if got := left(); got != c.want {
					t.Fatalf("step %d %v: remaining %d, want %d", i, c.reports, got, c.want)
				}
			}
			if w := do(h, "192.0.2.1:1", withReports("1")); w.Code != http.StatusTooManyRequests {
				t.Fatalf("over the debt: %d, want 429", w.Code)
			}
			// A debt: 30 reserved, 250 used, past the limit; later requests
			// wait it out.
			clk.Advance(25 * time.Second)
			if w := do(h, "192.0.2.1:1", withReports("250")); w.Code != http.StatusOK {
				t.Fatalf("debt request: %d", w.Code)
			}
			w := do(h, "192.0.2.1:1", nil)
			if w.Code != http.StatusTooManyRequests {
				t.Fatalf("after a debt: %d, want 429", w.Code)
			}
			if ra := w.Header().Get("Retry-After"); ra == "" {
				t.Fatal("no Retry-After after a debt")
			}
			if s := m.Stats(); s.SettleErrors != 0 {
				t.Fatalf("Stats %+v", s)
			}
		})
	}
}

// A panic after a report settles to it; a panic before keeps the
// estimate; the panic goes on either way.
func TestSettleOnPanic(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	h := mustMiddleware(t, e, WithCost(tokens), WithSettle()).Handler(reporting(t))
	if _, p := serveRecover(h, withReports("5", "panic")); !p {
		t.Fatal("the panic was swallowed")
	}
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 95 {
		t.Fatalf("panic after reporting 5: remaining %d, want 95", got)
	}
	if _, p := serveRecover(h, withReports("panic")); !p {
		t.Fatal("the panic was swallowed")
	}
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 65 {
		t.Fatalf("panic before reporting: remaining %d, want 65 (the estimate stays)", got)
	}
}

// A report the limiter cannot count (a debt above MaxLimit) is counted in
// SettleErrors, and the estimate stays; a report of MaxInt64 is accepted
// by ReportCost, which cannot know the limiter.
func TestSettleHugeReport(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	m := mustMiddleware(t, e, WithCost(tokens), WithSettle())
	h := m.Handler(reporting(t))
	for i, v := range []string{strconv.FormatInt(math.MaxInt64, 10), strconv.FormatInt(engine.MaxLimit+31, 10)} {
		if w := do(h, "192.0.2.1:1", withReports(v)); w.Code != http.StatusOK {
			t.Fatalf("%d: %d", i, w.Code)
		}
	}
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 40 {
		t.Fatalf("remaining %d, want 40: both estimates stay", got)
	}
	if s := m.Stats(); s.SettleErrors != 2 || s.Allowed != 2 {
		t.Fatalf("Stats %+v", s)
	}
}

// ReportCost outside a settling middleware says so; inside one it refuses
// a negative cost with an error naming it.
func TestReportCostErrors(t *testing.T) {
	if err := ReportCost(context.Background(), 3); !errors.Is(err, ErrNoSettle) {
		t.Fatalf("ReportCost without a middleware: %v", err)
	}
	e, _ := newEngine(t, engine.Config{Limit: 100})
	var got error
	h := mustMiddleware(t, e, WithSettle()).Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = ReportCost(r.Context(), -1)
	}))
	do(h, "192.0.2.1:1", nil)
	if got == nil || got.Error() != "httplimit: ReportCost(-1): want a cost ≥ 0; the earlier report, or the estimate, stands" {
		t.Fatalf("ReportCost(-1): %v", got)
	}
	// A middleware without WithSettle puts no cell in the context.
	h = mustMiddleware(t, e).Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = ReportCost(r.Context(), 1)
	}))
	do(h, "192.0.2.1:1", nil)
	if !errors.Is(got, ErrNoSettle) {
		t.Fatalf("ReportCost under a plain middleware: %v", got)
	}
}

// A client that hangs up mid-handler is still charged what its request
// used: the settle does not run on the request's cancelled context.
func TestSettleAfterTheClientLeft(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	l := &adaptertest.Reserving{E: e}
	ctx, cancel := context.WithCancel(context.Background())
	h := mustMiddleware(t, l, WithCost(tokens), WithSettle()).Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		cancel()
		<-r.Context().Done()
		_ = ReportCost(r.Context(), 80)
	}))
	do(h, "192.0.2.1:1", func(r *http.Request) { *r = *r.WithContext(ctx) })
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 20 {
		t.Fatalf("remaining %d, want 20", got)
	}
	if l.Settles.Load() != 1 || l.CtxDone.Load() != 0 {
		t.Fatalf("%d settles, %d of them on a done context", l.Settles.Load(), l.CtxDone.Load())
	}
}

// Stacked settling middlewares (a tokens-per-minute limit inside a
// tokens-per-day one) settle to the one report; NewMulti settles every
// policy not in flight, all or nothing on the way in.
func TestSettleStackedAndMulti(t *testing.T) {
	minute, _ := newEngine(t, engine.Config{Limit: 100})
	day, _ := newEngine(t, engine.Config{Limit: 1000})
	inner := New(minute, WithCost(tokens), WithSettle(), WithPolicyName("minute", 0))
	outer := New(day, WithCost(tokens), WithSettle(), WithPolicyName("day", 0))
	h := outer(inner(reporting(t)))
	do(h, "192.0.2.1:1", withReports("12"))
	if a, b := minute.AllowN("192.0.2.1", 0).Remaining, day.AllowN("192.0.2.1", 0).Remaining; a != 88 || b != 988 {
		t.Fatalf("stacked: remaining %d and %d, want 88 and 988", a, b)
	}

	// An LLM gateway's three limits per tenant: requests per minute,
	// tokens per minute (an estimate, settled) and requests in flight.
	rpm, _ := newEngine(t, engine.Config{Limit: 3})
	tpm, _ := newEngine(t, engine.Config{Limit: 100})
	conc, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	one := func(*http.Request) int64 { return 1 }
	m, err := NewMulti([]Policy{
		{Name: "rpm", Limiter: rpm, Cost: one},
		{Name: "tpm", Limiter: tpm, Settle: true},
		{Name: "conc", Limiter: conc, Cost: one, InFlight: true},
	}, WithCost(tokens))
	if err != nil {
		t.Fatal(err)
	}
	hm := m.Handler(reporting(t))
	left := func() [3]int64 {
		return [3]int64{rpm.AllowN("192.0.2.1", 0).Remaining, tpm.AllowN("192.0.2.1", 0).Remaining, conc.AllowN("192.0.2.1", 0).Remaining}
	}
	w := do(hm, "192.0.2.1:1", withReports("45"))
	if w.Code != http.StatusOK {
		t.Fatalf("multi: %d", w.Code)
	}
	checkMembers(t, w.Header(), []string{"rpm", "tpm", "conc"}, []int64{3, 100, 1}, []int64{2, 70, 0})
	if got := left(); got != [3]int64{2, 55, 1} {
		t.Fatalf("multi: remaining %v, want [2 55 1]: rpm kept, tpm settled, conc given back", got)
	}
	w = do(hm, "192.0.2.1:1", withReports("60")) // tokens 45 + 60: a debt of 5
	if got := left(); w.Code != http.StatusOK || got != [3]int64{1, 0, 1} {
		t.Fatalf("second: %d, remaining %v", w.Code, got)
	}
	if w = do(hm, "192.0.2.1:1", nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("over the tokens: %d", w.Code)
	}
	if got := left(); got != [3]int64{1, 0, 1} {
		t.Fatalf("the refusal charged: remaining %v", got)
	}
	if _, err := NewMulti([]Policy{{Name: "a", Limiter: tpm, InFlight: true, Settle: true}}); err == nil {
		t.Fatal("a policy both in flight and settled is accepted")
	}
}

// Under WithDryRun a request the limiter refuses is served holding
// nothing: ReportCost still works (the handler runs under the middleware)
// and settles nothing.
func TestSettleDryRun(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 40})
	m := mustMiddleware(t, e, WithCost(tokens), WithSettle(), WithDryRun())
	h := m.Handler(reporting(t))
	do(h, "192.0.2.1:1", withReports("15"))
	if w := do(h, "192.0.2.1:1", withReports("3")); w.Code != http.StatusOK {
		t.Fatalf("dry run: %d", w.Code)
	}
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 25 {
		t.Fatalf("remaining %d, want 25", got)
	}
	if s := m.Stats(); s.WouldDeny != 1 || s.Allowed != 1 {
		t.Fatalf("Stats %+v", s)
	}
}

// A request estimated at 0 is still settled to what it reports: it
// reserves 1 unit (adapter.Reserved), settled to the report, and given
// back when nothing is reported, so an estimate of 0 with no report
// charges nothing. (It was first not charged at all, a reservation of 0
// units having nothing to settle; then charged afterwards, but never
// refused: TestZeroEstimateWaitsOutADebt.)
func TestSettleFromAnEstimateOfZero(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	zero := func(*http.Request) int64 { return 0 }
	m := mustMiddleware(t, e, WithCost(zero), WithSettle())
	h := m.Handler(reporting(t))
	do(h, "192.0.2.1:1", withReports("7"))
	do(h, "192.0.2.1:1", nil) // nothing reported: nothing charged
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 93 {
		t.Fatalf("remaining %d, want 93", got)
	}
	l := &adaptertest.Reserving{E: e}
	h = mustMiddleware(t, l, WithCost(zero), WithSettle()).Handler(reporting(t))
	do(h, "192.0.2.1:1", withReports("3"))
	if got := e.AllowN("192.0.2.1", 0).Remaining; got != 90 || l.Settles.Load() != 1 {
		t.Fatalf("through a ReservingLimiter: remaining %d, want 90; %d settles", got, l.Settles.Load())
	}
}

// A request estimated at 0 waits out a debt as a one-unit request does:
// WithSettle reserves 1 unit for it (adapter.Reserved), so once one request
// reported 500 tokens against a limit of 100 the next ones are refused
// with 429. (A reservation of 0 units is always admitted, and all five
// were served: an estimator that returns 0 for a request it cannot size
// turned the tokens-per-minute limit off for that key.)
func TestZeroEstimateWaitsOutADebt(t *testing.T) {
	e := limitEngine(t, 100, engine.SlidingWindowStrict)
	m, err := NewMiddleware(e, WithSettle(), WithCost(func(*http.Request) int64 { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		_ = ReportCost(r.Context(), 500)
	}))
	codes := []int{}
	for range 5 {
		w, _ := doCatch(h, "192.0.2.1:1", nil)
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

// NewMulti's twin of TestZeroEstimateWaitsOutADebt: a settled policy whose
// Cost is 0 (Policy.Cost) beside a requests-per-minute policy refuses once
// it is in debt.
func TestZeroEstimateWaitsOutADebtMulti(t *testing.T) {
	rpm := limitEngine(t, 1000, engine.SlidingWindowStrict)
	tpm := limitEngine(t, 100, engine.SlidingWindowStrict)
	m, err := NewMulti([]Policy{
		{Name: "rpm", Limiter: rpm},
		{Name: "tpm", Limiter: tpm, Settle: true, Cost: func(*http.Request) int64 { return 0 }},
	})
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		_ = ReportCost(r.Context(), 500)
	}))
	for range 5 {
		doCatch(h, "192.0.2.1:1", nil)
	}
	if got := remainingOf(tpm, "192.0.2.1"); got != 0 {
		t.Fatalf("tpm not in debt: %d", got)
	}
	if served > 1 {
		t.Fatalf("%d requests served while tpm was in debt past its limit", served)
	}
}

// Stats.SettleErrors counts requests, as every counter does: one request
// whose two settled policies both refuse the report counts once (it
// counted 2; grpclimit's doc said one per policy).
func TestSettleErrorsCountRequestsOnce(t *testing.T) {
	a := limitEngine(t, 100, engine.SlidingWindowStrict)
	b := limitEngine(t, 100, engine.SlidingWindowStrict)
	m, err := NewMulti([]Policy{
		{Name: "a", Limiter: a, Settle: true},
		{Name: "b", Limiter: b, Settle: true},
	}, WithCost(func(*http.Request) int64 { return 5 }))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = ReportCost(r.Context(), 1<<41)
	}))
	doCatch(h, "192.0.2.1:1", nil)
	if s := m.Stats(); s.SettleErrors != 1 || s.Allowed != 1 {
		t.Fatalf("Stats %+v: want SettleErrors 1 (one request), Allowed 1", s)
	}
	if ga, gb := remainingOf(a, "192.0.2.1"), remainingOf(b, "192.0.2.1"); ga != 95 || gb != 95 {
		t.Fatalf("the estimate stays: a %d, b %d", ga, gb)
	}
}
