package httplimit

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
)

// TestMultiChargesOnlyWhatItAdmits: a per-IP limit and a per-tenant one
// in one Middleware over engines. A request the tenant limit refuses
// leaves the per-IP limit uncharged (all or nothing), where nested
// middlewares charge the outer limit for it. Every response has one list
// member per decided policy, in order.
func TestMultiChargesOnlyWhatItAdmits(t *testing.T) {
	ipE, _ := newEngine(t, engine.Config{Limit: 5})
	tenantE, _ := newEngine(t, engine.Config{Limit: 1})
	tenant := KeyByHeader("X-Tenant", MissingReject)
	m, err := NewMulti([]Policy{
		{Name: "per-ip", Limiter: ipE},
		{Name: "tenant", Limiter: tenantE, Key: tenant},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(okHandler)
	req := func(r *http.Request) { r.Header.Set("X-Tenant", "acme") }
	ipLeft := func() int64 { return ipE.AllowN("192.0.2.1", 0).Remaining }

	w := do(h, "192.0.2.1:1", req)
	if w.Code != http.StatusOK || ipLeft() != 4 {
		t.Fatalf("first: %d, per-ip remaining %d", w.Code, ipLeft())
	}
	checkMembers(t, w.Header(), []string{"per-ip", "tenant"}, []int64{5, 1}, []int64{4, 0})
	for i := range 3 {
		w = do(h, "192.0.2.1:1", req)
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("refusal %d: %d", i, w.Code)
		}
		if got := ipLeft(); got != 4 {
			t.Fatalf("refusal %d charged the per-ip limit: remaining %d, want 4", i, got)
		}
		checkMembers(t, w.Header(), []string{"per-ip", "tenant"}, []int64{5, 1}, []int64{4, 0})
	}
	if s := m.Stats(); s != (Stats{Allowed: 1, Denied: 3}) {
		t.Fatalf("Stats %+v", s)
	}

	// Nested middlewares, the same limits: the outer one is charged for
	// every request the inner one refuses.
	ipE2, _ := newEngine(t, engine.Config{Limit: 5})
	tenantE2, _ := newEngine(t, engine.Config{Limit: 1})
	nested := New(ipE2, WithPolicyName("per-ip", 0))(New(tenantE2, WithPolicyName("tenant", 0), WithKey(tenant))(okHandler))
	for range 4 {
		do(nested, "192.0.2.1:1", req)
	}
	if got := ipE2.AllowN("192.0.2.1", 0).Remaining; got != 1 {
		t.Fatalf("nested: per-ip remaining %d, want 1 (charged for 3 refusals)", got)
	}
}

// TestMultiInOrderOverSharedLimiters: with a limiter that is not an engine
// among the policies, they are asked in order and the first refusal
// decides; an earlier policy keeps its charge (it cannot be taken back),
// and a later one is not asked.
func TestMultiInOrderOverSharedLimiters(t *testing.T) {
	first, _ := newEngine(t, engine.Config{Limit: 5})
	var asked []string
	refuse := adaptertest.LimiterFunc(func(_ context.Context, key string, n int64) (engine.Decision, error) {
		asked = append(asked, "refuse")
		return engine.Decision{Limit: 1, RetryAfter: 1e9}, nil
	})
	never := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		asked = append(asked, "never")
		return engine.Decision{Allowed: true, Limit: 1}, nil
	})
	m, err := NewMulti([]Policy{{Name: "a", Limiter: first}, {Name: "b", Limiter: refuse}, {Name: "c", Limiter: never}})
	if err != nil {
		t.Fatal(err)
	}
	w := do(m.Handler(okHandler), "192.0.2.1:1", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("%d", w.Code)
	}
	if got := first.AllowN("192.0.2.1", 0).Remaining; got != 4 {
		t.Fatalf("the first policy's remaining %d, want 4 (charged, as documented)", got)
	}
	if strings.Join(asked, ",") != "refuse" {
		t.Fatalf("asked %v, want the refusing policy only", asked)
	}
	checkMembers(t, w.Header(), []string{"a", "b"}, []int64{5, 1}, []int64{4, 0})
}

// TestNewMultiErrors: every mistake is an error naming the policy.
func TestNewMultiErrors(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	for _, c := range []struct {
		name string
		ps   []Policy
		opts []Option
		want string
	}{
		{"none", nil, nil, "NewMulti: 0 policies, want 1 … 8"},
		{"WithKey", []Policy{{Name: "a", Limiter: e}}, []Option{WithKey(KeyByIP(64))}, "WithKey and WithPolicyName are given per policy"},
		{"twice", []Policy{{Name: "a", Limiter: e}, {Name: "a", Limiter: e}}, nil, `NewMulti policy 1 ("a"): the name is given twice`},
		{"bad name", []Policy{{Name: "", Limiter: e}}, nil, `NewMulti policy 0 (""): WithPolicyName name`},
		{"not a limiter", []Policy{{Name: "a", Limiter: "x"}}, nil, `NewMulti policy 0 ("a"): string is not a limiter`},
		{"bad key", []Policy{{Name: "a", Limiter: e, Key: KeyByIP(200)}}, nil, "KeyByIP ipv6Prefix = 200"},
	} {
		if _, err := NewMulti(c.ps, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// "A FixedWindow engine is refused" for requests in flight: through
// Policy.InFlight and through WithInFlight on NewMulti too.
func TestInFlightFixedRefusedInMulti(t *testing.T) {
	fixed := limitEngine(t, 5, engine.FixedWindow)
	other := limitEngine(t, 5, engine.SlidingWindowStrict)
	if _, err := NewMulti([]Policy{{Name: "a", Limiter: other}, {Name: "b", Limiter: fixed, InFlight: true}}); err == nil {
		t.Error("Policy.InFlight on a FixedWindow engine is accepted")
	}
	if _, err := NewMulti([]Policy{{Name: "a", Limiter: other}, {Name: "b", Limiter: fixed}}, WithInFlight()); err == nil {
		t.Error("WithInFlight on NewMulti with a FixedWindow engine is accepted")
	}
	// a settled FixedWindow policy is fine: a settle is not a lease
	if _, err := NewMulti([]Policy{{Name: "b", Limiter: fixed, Settle: true}}); err != nil {
		t.Errorf("Policy.Settle on FixedWindow: %v", err)
	}
}
