package httplimit

// The rate-limit fields under WithSettle: the reservation's values.

import (
	"net/http"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// "The rate-limit fields ... carry the reservation's values (the estimate's
// Remaining), and the settle's effect shows in the next response's fields."
func TestSettleHeadersCarryTheReservation(t *testing.T) {
	e := limitEngine(t, 100, engine.SlidingWindowStrict)
	m, err := NewMiddleware(e, WithSettle(), WithCost(func(*http.Request) int64 { return 30 }),
		WithHeaders(HeadersDraft|HeadersLegacy))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = ReportCost(r.Context(), 5)
		w.WriteHeader(200)
		_ = ReportCost(r.Context(), 45)
	}))
	w, _ := doCatch(h, "192.0.2.1:1", nil)
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "70" {
		t.Fatalf("first: X-RateLimit-Remaining %q, want 70", got)
	}
	if got := remainingOf(e, "192.0.2.1"); got != 55 {
		t.Fatalf("settled to the last report: remainingOf %d, want 55", got)
	}
	w, _ = doCatch(h, "192.0.2.1:1", nil)
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "25" {
		t.Fatalf("second: X-RateLimit-Remaining %q, want 25", got)
	}
}

// Under WithSettle an admitted t= is the reservation's, as the doc says:
// it bounds the units reserved, not a debt charged when the handler
// returns. A handler that takes 5 s and reports 60 for an estimate of 10
// leaves a debt that outlives the t=11 sent by up to those 5 s; the next
// response's fields carry it. (The doc first promised a true upper bound
// on when the whole quota is free, which no value sent first can keep.)
func TestSettleTEqualsBoundsTheReservation(t *testing.T) {
	e, clk := adaptertest.NewEngine(t, engine.Config{Algorithm: engine.SlidingWindowStrict, SubWindows: 10}, 100)
	m, err := NewMiddleware(e, WithSettle(), WithCost(func(*http.Request) int64 { return 10 }))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)           // the fields go out with the header
		clk.Advance(5 * time.Second) // the model answers 5 s later
		_ = ReportCost(r.Context(), 60)
	}))
	w, _ := doCatch(h, "192.0.2.1:1", nil)
	members, err := adaptertest.ParseList(w.Header().Values("RateLimit"))
	if err != nil || len(members) != 1 {
		t.Fatalf("RateLimit %q: %v", w.Header().Values("RateLimit"), err)
	}
	tEq := members[0].Params["t"]
	if tEq != 11 {
		t.Fatalf("t=%d, want 11", tEq)
	}
	clk.Advance(time.Duration(tEq)*time.Second - 5*time.Second) // t= seconds after the response's header
	if got := remainingOf(e, "192.0.2.1"); got != 50 {
		t.Fatalf("t=%d after the response: remainingOf %d, want 50 (the debt of 50, charged 5 s after the header, is still in the window)", tEq, got)
	}
	clk.Advance(5 * time.Second) // t= seconds after the settle
	if got := remainingOf(e, "192.0.2.1"); got != 100 {
		t.Fatalf("t=%d after the settle: remainingOf %d, want 100", tEq, got)
	}
}
