package grpclimit

import (
	"context"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestMultiChargesOnlyWhatItAdmits: a per-IP limit and a per-tenant one
// in one Interceptor over engines, over a real loopback server. A call the
// tenant limit refuses leaves the per-IP limit uncharged; every call has
// one metadata value per policy, in order. Chained interceptors charge the
// outer limit for it.
func TestMultiChargesOnlyWhatItAdmits(t *testing.T) {
	ipE, _ := newEngine(t, engine.Config{Limit: 5})
	tenantE, _ := newEngine(t, engine.Config{Limit: 1})
	tenant := KeyByMetadata("x-tenant", MissingReject)
	i, err := NewMultiInterceptor([]Policy{
		{Name: "per-ip", Limiter: ipE},
		{Name: "tenant", Limiter: tenantE, Key: tenant},
	})
	if err != nil {
		t.Fatal(err)
	}
	cc := serveUnary(t, i)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
	ipLeft := func() int64 { return ipE.AllowN("127.0.0.1", 0).Remaining }
	check := func(step string, r result, want codes.Code, rs ...int64) {
		t.Helper()
		if r.code != want {
			t.Fatalf("%s: %v %s, want %v", step, r.code, r.msg, want)
		}
		if msg := adaptertest.CheckMembers(r.header.Get(MDPolicy), r.header.Get(MDRateLimit), []string{"per-ip", "tenant"}, []int64{5, 1}, rs); msg != "" {
			t.Errorf("%s: %s", step, msg)
		}
	}
	check("first", say(t, cc, ctx, mSay), codes.OK, 4, 0)
	for range 3 {
		check("refused", say(t, cc, ctx, mSay), codes.ResourceExhausted, 4, 0)
		if got := ipLeft(); got != 4 {
			t.Fatalf("a refusal charged the per-ip limit: remaining %d, want 4", got)
		}
	}
	if s := i.Stats(); s != (Stats{Allowed: 1, Denied: 3}) {
		t.Fatalf("Stats %+v", s)
	}

	ipE2, _ := newEngine(t, engine.Config{Limit: 5})
	tenantE2, _ := newEngine(t, engine.Config{Limit: 1})
	cc2, _ := serve(t, grpc.ChainUnaryInterceptor(
		mustInterceptorT(t, ipE2, WithPolicyName("per-ip", 0)).Unary(),
		mustInterceptorT(t, tenantE2, WithPolicyName("tenant", 0), WithKey(tenant)).Unary()))
	for range 4 {
		say(t, cc2, ctx, mSay)
	}
	if got := ipE2.AllowN("127.0.0.1", 0).Remaining; got != 1 {
		t.Fatalf("chained: per-ip remaining %d, want 1 (charged for 3 refusals)", got)
	}
}

// TestMultiInOrderOverSharedLimiters: with a limiter that is not an engine
// among the policies, the first refusal decides; an earlier policy keeps
// its charge, a later one is not asked.
func TestMultiInOrderOverSharedLimiters(t *testing.T) {
	first, _ := newEngine(t, engine.Config{Limit: 5})
	asked := 0
	refuse := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		asked++
		return engine.Decision{Limit: 1, RetryAfter: 1e9}, nil
	})
	never := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		t.Error("the policy after the refusing one was asked")
		return engine.Decision{Allowed: true, Limit: 1}, nil
	})
	i, err := NewMultiInterceptor([]Policy{{Name: "a", Limiter: first, Key: KeyByMethod()}, {Name: "b", Limiter: refuse}, {Name: "c", Limiter: never}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = i.Unary()(callCtx(tcp("192.0.2.1:4711")), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, func(context.Context, any) (any, error) { return nil, nil })
	if status.Code(err) != codes.ResourceExhausted || asked != 1 {
		t.Fatalf("%v, asked %d", err, asked)
	}
	if got := first.AllowN(mSay, 0).Remaining; got != 4 {
		t.Fatalf("the first policy's remaining %d, want 4 (charged, as documented)", got)
	}
}

// TestNewMultiInterceptorErrors: every mistake is an error naming the
// policy.
func TestNewMultiInterceptorErrors(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	for _, c := range []struct {
		ps   []Policy
		opts []Option
		want string
	}{
		{nil, nil, "NewMultiInterceptor: 0 policies, want 1 … 8"},
		{[]Policy{{Name: "a", Limiter: e}}, []Option{WithPolicyName("x", 0)}, "WithKey and WithPolicyName are given per policy"},
		{[]Policy{{Name: "a", Limiter: e}, {Name: "a", Limiter: e}}, nil, `policy 1 ("a"): the name is given twice`},
		{[]Policy{{Name: "a", Limiter: e}}, []Option{WithMethodCost(mSay, 3)}, `policy 0 ("a"): WithMethodCost`},
	} {
		if _, err := NewMultiInterceptor(c.ps, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

type panickingReserver struct{ e *engine.Engine }

func (l *panickingReserver) AllowN(_ context.Context, key string, n int64) (engine.Decision, error) {
	return l.e.AllowN(key, n), nil
}

func (l *panickingReserver) ReserveN(context.Context, string, int64) (engine.Decision, SettleFunc, error) {
	panic("backend bug")
}

// grpclimit's twin of httplimit's TestMultiPanicInASharedPolicyGivesBack: a
// shared limiter that panics in ReserveN after an engine policy reserved
// its unit in flight gives that unit back, and the panic goes on (it was
// held until the lease ended).
func TestMultiPanicInASharedPolicyGivesBack(t *testing.T) {
	first, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.SlidingWindowStrict})
	other, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.SlidingWindowStrict})
	i, err := NewMultiInterceptor([]Policy{
		{Name: "first", Limiter: first, InFlight: true},
		{Name: "bad", Limiter: &panickingReserver{e: other}, InFlight: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = i.Unary()(serverCtx(), nil, sayInfo, func(context.Context, any) (any, error) { return "ok", nil })
	}()
	if got := remainingOf(first, "192.0.2.1"); got != 5 {
		t.Fatalf("the engine policy keeps %d units in flight after the panic", 5-got)
	}
}
