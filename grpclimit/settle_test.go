package grpclimit

// WithSettle and ReportCost: what a report reaches, and what a call
// estimated at 0 is refused for.

import (
	"context"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

// ReportCost reports the cost "of the call whose context is ctx": a report
// through a finished call's context reaches no later call.
func TestReportCostReachesOnlyItsCall(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	i := mustInterceptorT(t, e, WithSettle(), WithMethodCost(mSay, 5))
	u := i.Unary()
	var stale context.Context
	if _, err := u(serverCtx(), nil, sayInfo, func(ctx context.Context, _ any) (any, error) {
		stale = ctx
		return "ok", ReportCost(ctx, 5)
	}); err != nil {
		t.Fatal(err)
	}
	for n := range 15 {
		before := remainingOf(e, "192.0.2.1")
		if _, err := u(serverCtx(), nil, sayInfo, func(ctx context.Context, _ any) (any, error) {
			_ = ReportCost(stale, 40)
			return "ok", nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := remainingOf(e, "192.0.2.1"); got != before-5 {
			t.Fatalf("call %d: remaining %d, want %d: a stale report settled it", n, got, before-5)
		}
	}
}

// The twin of httplimit's TestZeroEstimateWaitsOutADebt: a call estimated
// at 0 (WithMethodCost(m, 0)) reserves 1 unit under WithSettle, so once a
// call reported 500 against a limit of 100 the next is ResourceExhausted.
// (A reservation of 0 units is always admitted, and five such calls were
// all served.)
func TestZeroEstimateWaitsOutADebt(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	i := mustInterceptorT(t, e, WithSettle(), WithMethodCost(mSay, 0))
	u := i.Unary()
	served := 0
	var errs []error
	for range 5 {
		_, err := u(serverCtx(), nil, sayInfo, func(ctx context.Context, _ any) (any, error) {
			served++
			return "ok", ReportCost(ctx, 500)
		})
		errs = append(errs, err)
	}
	if d := e.AllowN("192.0.2.1", 1); d.Allowed {
		t.Fatalf("the key is not in debt: %+v", d)
	}
	if served > 1 {
		t.Fatalf("%d calls served while the key was in debt past its limit (errors %v)", served, errs)
	}
}

// Stats.SettleErrors counts calls, as httplimit counts requests: one call
// whose two settled policies both refuse the report (a debt above
// MaxLimit) counts once, and both estimates stay.
func TestSettleErrorsCountCallsOnce(t *testing.T) {
	a, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	b, _ := newEngine(t, engine.Config{Limit: 100, Algorithm: engine.SlidingWindowStrict})
	i, err := NewMultiInterceptor([]Policy{{Name: "a", Limiter: a, Settle: true}, {Name: "b", Limiter: b, Settle: true}}, WithMethodCost(mSay, 5))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := i.Unary()(serverCtx(), nil, sayInfo, func(ctx context.Context, _ any) (any, error) {
		return "ok", ReportCost(ctx, 1<<41)
	}); err != nil {
		t.Fatal(err)
	}
	if s := i.Stats(); s.SettleErrors != 1 || s.Allowed != 1 {
		t.Fatalf("Stats %+v: want SettleErrors 1 (one call), Allowed 1", s)
	}
	if ga, gb := remainingOf(a, "192.0.2.1"), remainingOf(b, "192.0.2.1"); ga != 95 || gb != 95 {
		t.Fatalf("the estimates stay: a %d, b %d, want 95", ga, gb)
	}
}
