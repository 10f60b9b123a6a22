package grpclimit

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
)

// TestConstructionErrors: every misconfiguration is an error from
// NewInterceptor or NewClient naming the option, and the Must forms panic
// with it.
func TestConstructionErrors(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	for _, c := range []struct {
		l    any
		opts []Option
		want string
	}{
		{nil, nil, "grpclimit: NewInterceptor: nil limiter (<nil>)"},
		{e, []Option{nil}, "grpclimit: NewInterceptor: option 0 is nil"},
		{"e", nil, "grpclimit: NewInterceptor: string is not a limiter"},
		{e, []Option{WithKey(KeyByIP(200))}, "grpclimit: WithKey: KeyByIP ipv6Prefix = 200, want 1 … 128 (0 for 64)"},
		{e, []Option{WithKey(Key{})}, "grpclimit: WithKey: the zero Key"},
		{e, []Option{WithKey(KeyFunc(nil))}, "grpclimit: WithKey: KeyFunc(nil)"},
		{e, []Option{WithKey(KeyByXForwardedFor(nil, 64))}, "grpclimit: WithKey: KeyByXForwardedFor trusted is empty"},
		{e, []Option{WithKey(KeyByForwarded([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, 64))}, "grpclimit: WithKey: KeyByForwarded trusted[0] = 0.0.0.0/0 trusts every address"},
		{e, []Option{WithKey(KeyByMetadata("grpc-timeout", MissingReject))}, `KeyByMetadata name = "grpc-timeout": grpc- keys are reserved`},
		{e, []Option{WithKey(KeyByMetadata("key-bin", MissingReject))}, "binary (-bin) metadata is not supported"},
		{e, []Option{WithKey(KeyByMetadata("a b", MissingReject))}, "want only a-z"},
		{e, []Option{WithKey(KeyByMetadata("t", MissingFallback(KeyByIP(-1))))}, "grpclimit: WithKey: KeyByMetadata(t) MissingFallback: KeyByIP ipv6Prefix = -1"},
		{e, []Option{WithKey(Compose())}, "Compose needs at least one part"},
		{e, []Option{WithKey(Compose(KeyByMethod(), Key{}))}, "Compose part 1: the zero Key"},
		{e, []Option{WithMethodCost("Say", 1)}, `WithMethodCost("Say", 1): want "/pkg.Service/Method"`},
		{e, []Option{WithMethodCost("/svc/", 1)}, `WithMethodCost("/svc/", 1): want`},
		{e, []Option{WithMethodCost("/a/b/c", 1)}, `WithMethodCost("/a/b/c", 1): want`},
		{e, []Option{WithMethodCost(mSay, -1)}, "want a cost ≥ 0"},
		{e, []Option{WithMethodCost(mSay, 1), WithMethodCost(mSay, 2)}, "given twice"},
		{e, []Option{WithMethodCost(mSay, 3)}, "grpclimit: WithMethodCost(\"/ringlimit.test.Echo/Say\", 3): above the limiter's Limit 2, so no call could ever fit"},
		{e, []Option{WithCost(nil)}, "WithCost(nil)"},
		{e, []Option{WithCost(func(context.Context, string) int64 { return 1 }), WithMethodCost(mSay, 1)}, "WithCost and WithMethodCost cannot be combined"},
		{e, []Option{WithExempt(nil)}, "WithExempt(nil), want a function"},
		{e, []Option{WithHeaders(2)}, "WithHeaders(2), want HeadersDraft (1) or 0"},
		{e, []Option{WithHeadersBelow(0)}, "WithHeadersBelow(0), want 0 < share ≤ 1"},
		{e, []Option{WithPolicyName("", 0)}, "grpclimit: WithPolicyName name = \"\""},
		{e, []Option{WithPolicyName("p", 1)}, "grpclimit: WithPolicyName window = 1ns, but the limiter's Config().Window = 10s"},
	} {
		_, err := NewInterceptor(c.l, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewInterceptor: %v, want %q", err, c.want)
		}
	}
	// Several errors are joined.
	_, err := NewInterceptor(e, WithHeadersBelow(2), WithMethodCost("x", 1))
	if err == nil || !strings.Contains(err.Error(), "WithHeadersBelow(2)") || !strings.Contains(err.Error(), `WithMethodCost("x", 1)`) {
		t.Errorf("joined: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(error).Error(), "WithHeadersBelow(2)") {
				t.Errorf("UnaryServerInterceptor did not panic with the error: %v", r)
			}
		}()
		UnaryServerInterceptor(e, WithHeadersBelow(2))
	}()
	for _, c := range []struct {
		l    any
		opts []ClientOption
		want string
	}{
		{nil, nil, "grpclimit: NewClient: nil limiter"},
		{e, []ClientOption{nil}, "option 0 is nil"},
		{e, []ClientOption{WithClientKey(nil)}, "WithClientKey(nil)"},
		{e, []ClientOption{WithClientCost("x", 1)}, `WithClientCost("x", 1): want`},
		{e, []ClientOption{WithClientCost(mSay, -2)}, "want a cost ≥ 0"},
		{e, []ClientOption{WithMaxWait(0)}, "WithMaxWait(0s), want > 0"},
	} {
		_, err := NewClient(c.l, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewClient: %v, want %q", err, c.want)
		}
	}
}
