package httplimit

// What ReportCost reaches under WithSettle: only its own request, from
// any goroutine, without allocating, and nothing from a refusal.

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

// ReportCost "reports the actual cost of the request whose context is ctx":
// a report made through a request's context after that request returned
// must not reach another request. Here request A keeps its context, returns,
// and reports 40 while request B (estimate 5, reporting nothing: "A handler
// that reports nothing keeps the estimate") runs; B must be settled at 5.
func TestReportCostReachesOnlyItsRequest(t *testing.T) {
	e := limitEngine(t, 100, engine.SlidingWindowStrict)
	m, err := NewMiddleware(e, WithSettle(), WithCost(func(*http.Request) int64 { return 5 }))
	if err != nil {
		t.Fatal(err)
	}
	var stale context.Context
	hA := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stale = r.Context()
		if err := ReportCost(r.Context(), 5); err != nil {
			t.Error(err)
		}
	}))
	doCatch(hA, "192.0.2.1:1", nil)
	if got := remainingOf(e, "192.0.2.1"); got != 95 {
		t.Fatalf("A: remainingOf %d, want 95", got)
	}
	for i := range 50 { // B, many times, so that a pooled state is reused
		hB := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = ReportCost(stale, 40) // A's context, after A returned
		}))
		before := remainingOf(e, "192.0.2.2")
		doCatch(hB, "192.0.2.2:1", nil)
		if got := remainingOf(e, "192.0.2.2"); got != before-5 {
			t.Fatalf("B %d: remainingOf %d, want %d: A's late report settled B", i, got, before-5)
		}
		if i == 15 {
			break
		}
	}
	if got := remainingOf(e, "192.0.2.1"); got != 95 {
		t.Fatalf("A after its late report: remainingOf %d, want 95 (settled once)", got)
	}
}

// ReportCost "is safe to call from any goroutine": reports racing the
// handler's return and the settle (run under -race), and the settle takes
// one of the reported costs, each a whole report.
func TestReportCostRacingTheSettle(t *testing.T) {
	e := limitEngine(t, 1_000_000, engine.SlidingWindowStrict)
	m, err := NewMiddleware(e, WithSettle(), WithCost(func(*http.Request) int64 { return 7 }))
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
					_ = ReportCost(ctx, 100)
				}
			}()
		}
		runtime.Gosched()
	}))
	for i := range 200 {
		key := "192.0.2." + string(rune('0'+i%10)) + ":1"
		before := remainingOf(e, key[:len(key)-2])
		doCatch(h, key, nil)
		got := before - remainingOf(e, key[:len(key)-2])
		if got != 7 && got != 100 {
			t.Fatalf("request %d settled to %d, neither the estimate nor a report", i, got)
		}
	}
	wg.Wait()
}

// "a report allocates nothing", also a refused one without a settling
// middleware? (only the report into a settling middleware is checked).
func TestReportCostAllocatesNothing(t *testing.T) {
	e := limitEngine(t, 1_000_000, engine.SlidingWindowStrict)
	m, err := NewMiddleware(e, WithSettle())
	if err != nil {
		t.Fatal(err)
	}
	var allocs float64
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		n := int64(0)
		allocs = testing.AllocsPerRun(100, func() {
			n++
			_ = ReportCost(ctx, n)
		})
	}))
	doCatch(h, "192.0.2.1:1", nil)
	if allocs != 0 {
		t.Fatalf("ReportCost allocates %v per report", allocs)
	}
}

// A refused request holds nothing and runs no handler: a deny handler (or a
// refusal handler) that calls ReportCost charges nothing.
func TestReportCostFromARefusalChargesNothing(t *testing.T) {
	e := limitEngine(t, 10, engine.SlidingWindowStrict)
	var reportErr error
	m, err := NewMiddleware(e, WithSettle(), WithCost(func(*http.Request) int64 { return 6 }),
		WithDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reportErr = ReportCost(r.Context(), 50)
		})))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	doCatch(h, "192.0.2.1:1", nil)
	w, _ := doCatch(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatal(w.Code)
	}
	if got := remainingOf(e, "192.0.2.1"); got != 4 {
		t.Fatalf("remainingOf %d, want 4: the refusal's report was charged (ReportCost said %v)", got, reportErr)
	}
	t.Logf("ReportCost in a deny handler: %v", reportErr)
}
