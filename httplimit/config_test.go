package httplimit

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestMisconfigurationFailsAtConstruction: every bad option or key
// argument is an error from NewMiddleware that names it and its range,
// and a panic from New with the same message; none reaches a request.
func TestMisconfigurationFailsAtConstruction(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	trusted := testTrusted
	for _, c := range []struct {
		name string
		l    any
		opt  Option
		want string
	}{
		{"KeyByIP(200)", e, WithKey(KeyByIP(200)), "httplimit: WithKey: KeyByIP ipv6Prefix = 200, want 1 … 128 (0 for 64)"},
		{"KeyByIP(-1)", e, WithKey(KeyByIP(-1)), "httplimit: WithKey: KeyByIP ipv6Prefix = -1, want 1 … 128 (0 for 64)"},
		{"KeyByRoute(nil)", e, WithKey(KeyByRoute(nil, KeyByIP(64))), "httplimit: WithKey: KeyByRoute routeFunc is nil (pass httplimit.RoutePattern for the ServeMux pattern)"},
		{"KeyByRoute bad inner", e, WithKey(KeyByRoute(RoutePattern, KeyByIP(129))), "httplimit: WithKey: KeyByRoute inner: KeyByIP ipv6Prefix = 129, want 1 … 128 (0 for 64)"},
		{"KeyByHeader empty", e, WithKey(KeyByHeader("", MissingReject)), `httplimit: WithKey: KeyByHeader name = "", want a header field name (1 … 256 RFC 9110 token characters)`},
		{"KeyByHeader space", e, WithKey(KeyByHeader("X Api", MissingReject)), `httplimit: WithKey: KeyByHeader name = "X Api", want a header field name (1 … 256 RFC 9110 token characters)`},
		{"MissingFallback bad", e, WithKey(KeyByHeader("X-Api-Key", MissingFallback(KeyByIP(300)))), "httplimit: WithKey: KeyByHeader(X-Api-Key) MissingFallback: KeyByIP ipv6Prefix = 300, want 1 … 128 (0 for 64)"},
		{"MissingFallback zero", e, WithKey(KeyByHeader("X-Api-Key", MissingFallback(Key{}))), "httplimit: WithKey: KeyByHeader(X-Api-Key) MissingFallback: the zero Key (build one with KeyByIP, KeyByHeader, … or KeyFunc)"},
		{"Compose()", e, WithKey(Compose()), "httplimit: WithKey: Compose needs at least one part"},
		{"Compose bad part", e, WithKey(Compose(KeyByIP(64), KeyFunc(nil))), "httplimit: WithKey: Compose part 1: KeyFunc(nil)"},
		{"zero Key", e, WithKey(Key{}), "httplimit: WithKey: the zero Key (build one with KeyByIP, KeyByHeader, … or KeyFunc)"},
		{"XFF no trusted", e, WithKey(KeyByXForwardedFor(nil, 64)), "httplimit: WithKey: KeyByXForwardedFor trusted is empty, want the prefixes of your reverse proxies (with no proxy, use KeyByIP)"},
		{"XFF trust all", e, WithKey(KeyByXForwardedFor(mustPrefixes("0.0.0.0/0"), 64)), "httplimit: WithKey: KeyByXForwardedFor trusted[0] = 0.0.0.0/0 trusts every address, so any client could choose its key; want your proxies' prefixes (length ≥ 1)"},
		{"Forwarded trust all v6", e, WithKey(KeyByForwarded(mustPrefixes("10.0.0.0/8", "::/0"), 64)), "httplimit: WithKey: KeyByForwarded trusted[1] = ::/0 trusts every address, so any client could choose its key; want your proxies' prefixes (length ≥ 1)"},
		{"Forwarded trust all mapped", e, WithKey(KeyByForwarded(mustPrefixes("::ffff:0.0.0.0/96"), 64)), "httplimit: WithKey: KeyByForwarded trusted[0] = ::ffff:0.0.0.0/96 trusts every address, so any client could choose its key; want your proxies' prefixes (length ≥ 1)"},
		{"XFF invalid prefix", e, WithKey(KeyByXForwardedFor(append(trusted, netipPrefixZero), 64)), "httplimit: WithKey: KeyByXForwardedFor trusted[2] = invalid Prefix is not a valid prefix"},
		{"XFF bad ipv6Prefix", e, WithKey(KeyByXForwardedFor(trusted, 129)), "httplimit: WithKey: KeyByXForwardedFor ipv6Prefix = 129, want 1 … 128 (0 for 64)"},
		{"WithKeyErrorHandler(nil)", e, WithKeyErrorHandler(nil), "httplimit: WithKeyErrorHandler(nil), want a handler"},
		{"WithCost(nil)", e, WithCost(nil), "httplimit: WithCost(nil), want a cost function"},
		{"WithDenyHandler(nil)", e, WithDenyHandler(nil), "httplimit: WithDenyHandler(nil), want a handler"},
		{"WithExempt(nil)", e, WithExempt(nil), "httplimit: WithExempt(nil), want a function"},
		{"WithHeaders(8)", e, WithHeaders(8), "httplimit: WithHeaders(8), want a combination of HeadersDraft (1) and one of HeadersLegacy (2) and HeadersLegacyUnix (4), or 0"},
		{"WithHeaders(6)", e, WithHeaders(HeadersLegacy | HeadersLegacyUnix), "httplimit: WithHeaders(6), want a combination of HeadersDraft (1) and one of HeadersLegacy (2) and HeadersLegacyUnix (4), or 0"},
		{"WithHeadersBelow(0)", e, WithHeadersBelow(0), "httplimit: WithHeadersBelow(0), want 0 < share ≤ 1"},
		{"WithHeadersBelow(1.5)", e, WithHeadersBelow(1.5), "httplimit: WithHeadersBelow(1.5), want 0 < share ≤ 1"},
		{"WithPolicyName empty name", e, WithPolicyName("", 0), `httplimit: WithPolicyName name = "", want 1 … 64 printable ASCII characters`},
		{"WithPolicyName control byte", e, WithPolicyName("a\nb", 0), `httplimit: WithPolicyName name = "a?b" has byte 0xa at 1, want printable ASCII (0x20 … 0x7e)`},
		{"WithPolicyName negative window", e, WithPolicyName("p", -time.Second), "httplimit: WithPolicyName window = -1s, want 0 (the limiter's) or > 0"},
		{"WithPolicyName window mismatch", e, WithPolicyName("p", 5*time.Second), "httplimit: WithPolicyName window = 5s, but the limiter's Config().Window = 10s; pass 0 to take the limiter's"},
		{"nil option", e, nil, "httplimit: NewMiddleware: option 0 is nil"},
		{"nil limiter", nil, WithPolicyName("p", 0), "httplimit: NewMiddleware: nil limiter (<nil>)"},
		{"typed nil limiter", (*engine.Engine)(nil), WithPolicyName("p", 0), "httplimit: NewMiddleware: nil limiter (*engine.Engine)"},
		{"not a limiter", "engine", WithPolicyName("p", 0), "httplimit: NewMiddleware: string is not a limiter; want AllowN(key string, n int64) engine.Decision (Limiter, as *engine.Engine) or AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) (ContextLimiter, as *redisstore.Limiter)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := NewMiddleware(c.l, c.opt)
			if err == nil || err.Error() != c.want || m != nil {
				t.Fatalf("NewMiddleware: %v, %v\nwant error %q", m, err, c.want)
			}
			defer func() {
				if p := recover(); p == nil || p.(error).Error() != c.want {
					t.Fatalf("New: panic %v, want %q", p, c.want)
				}
			}()
			New(c.l, c.opt)
			t.Fatal("New did not panic")
		})
	}
	// Several bad options: all reported.
	_, err := NewMiddleware(e, WithCost(nil), WithHeadersBelow(2))
	if err == nil || err.Error() != "httplimit: WithCost(nil), want a cost function\nhttplimit: WithHeadersBelow(2), want 0 < share ≤ 1" {
		t.Fatalf("joined: %v", err)
	}
	if !strings.Contains(KeyByIP(200).Err().Error(), "ipv6Prefix = 200") || KeyByIP(64).Err() != nil {
		t.Fatal("Key.Err")
	}
}

// TestBadKeyIsNotAClientError guards a server-side mistake answered as a
// client error: KeyByIP(200) and KeyByRoute(nil, …) used to build, and
// answered every request 400.
func TestBadKeyIsNotAClientError(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	for _, k := range []Key{KeyByIP(200), KeyByRoute(nil, KeyByIP(64))} {
		if _, err := NewMiddleware(e, WithKey(k)); err == nil {
			t.Fatal("built")
		}
		// Even used directly, the bad Key answers its configuration error.
		if _, err := k.Of(httptest.NewRequest("GET", "/", nil)); err == nil || err != k.Err() {
			t.Fatalf("Of: %v", err)
		}
	}
}
