package grpclimit

import (
	"context"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// callCtx is the server context of a call from addr with incoming
// metadata md (key/value pairs).
func callCtx(addr net.Addr, md ...string) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	if len(md) > 0 {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(md...))
	}
	return ctx
}

func tcp(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// TestKeyByIPMatchesHTTPLimit: the same address gives the same key as
// httplimit.KeyByIP, for IPv4, mapped, zoned and IPv6 at several prefixes.
func TestKeyByIPMatchesHTTPLimit(t *testing.T) {
	for _, bits := range []int{0, 48, 64, 128} {
		gk, hk := KeyByIP(bits), httplimit.KeyByIP(bits)
		for _, a := range []string{"192.0.2.1:5", "[::ffff:192.0.2.1]:5", "[2001:db8:1:2:3:4:5:6]:5", "[fe80::1%eth0]:5", "[::1]:5"} {
			got, err := gk.Of(callCtx(tcp(a)), mSay)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = a
			want, err := hk.Of(r)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("KeyByIP(%d) of %s = %q, httplimit's %q", bits, a, got, want)
			}
		}
	}
	// A peer that is not an IP: Internal, never a shared key.
	_, err := KeyByIP(64).Of(callCtx(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}), mSay)
	if status.Code(err) != codes.Internal {
		t.Errorf("unix peer: %v", err)
	}
	_, err = KeyByIP(64).Of(context.Background(), mSay)
	if status.Code(err) != codes.Internal {
		t.Errorf("no peer: %v", err)
	}
	// A non-TCP net.Addr whose text is an address works.
	if k, err := KeyByIP(64).Of(callCtx(&net.UDPAddr{IP: net.ParseIP("198.51.100.2"), Port: 9}), mSay); err != nil || k != "198.51.100.2" {
		t.Errorf("UDP-shaped peer: %q %v", k, err)
	}
}

func TestKeyByMetadata(t *testing.T) {
	peerA := tcp("192.0.2.7:1")
	k := KeyByMetadata("X-Api-Key", MissingReject)
	for _, c := range []struct {
		md   []string
		want string
		code codes.Code
	}{
		{[]string{"x-api-key", "  k1 "}, "k1", codes.OK},
		{[]string{"x-api-key", "k1", "x-api-key", "k2"}, "k1", codes.OK},
		{nil, "", codes.InvalidArgument},
		{[]string{"x-api-key", "   "}, "", codes.InvalidArgument},
		{[]string{"x-api-key", strings.Repeat("a", MaxKeyBytes)}, strings.Repeat("a", MaxKeyBytes), codes.OK},
		{[]string{"x-api-key", strings.Repeat("a", MaxKeyBytes+1)}, "", codes.InvalidArgument},
	} {
		got, err := k.Of(callCtx(peerA, c.md...), mSay)
		if got != c.want || status.Code(err) != c.code {
			t.Errorf("%q: %q %v, want %q %v", c.md, got, err, c.want, c.code)
		}
	}
	fb := KeyByMetadata("tenant", MissingFallback(KeyByIP(64)))
	if got, _ := fb.Of(callCtx(peerA), mSay); got != "192.0.2.7" {
		t.Errorf("fallback: %q", got)
	}
	if got, _ := fb.Of(callCtx(peerA, "tenant", "acme"), mSay); got != "acme" {
		t.Errorf("tenant: %q", got)
	}
}

func TestKeyByMethodAndCompose(t *testing.T) {
	ctx := callCtx(tcp("192.0.2.7:1"), "tenant", "acme")
	k := Compose(KeyByMetadata("tenant", MissingReject), KeyByMethod(), KeyByIP(64))
	got, err := k.Of(ctx, mSay)
	if err != nil || got != "acme\x00"+mSay+"\x00192.0.2.7" {
		t.Errorf("Compose: %q %v", got, err)
	}
	if _, err := k.Of(callCtx(tcp("192.0.2.7:1")), mSay); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Compose passes on its part's error: %v", err)
	}
	// A KeyFunc's own status is kept; a plain error is InvalidArgument.
	e, _ := newEngine(t, engine.Config{})
	for _, c := range []struct {
		err  error
		code codes.Code
	}{
		{status.Error(codes.Unauthenticated, "who are you"), codes.Unauthenticated},
		{errPlain("bad tenant"), codes.InvalidArgument},
	} {
		i := mustInterceptorT(t, e, WithKey(KeyFunc(func(context.Context, string) (string, error) { return "", c.err })))
		r := say(t, serveUnary(t, i), nil, mSay)
		if r.code != c.code || !strings.Contains(r.msg, strings.TrimPrefix(c.err.Error(), "rpc error: code = Unauthenticated desc = ")) {
			t.Errorf("KeyFunc error %v: %v %q", c.err, r.code, r.msg)
		}
		if s := i.Stats(); s.Rejected != 1 {
			t.Errorf("Stats %+v", s)
		}
	}
}

type errPlain string

func (e errPlain) Error() string { return string(e) }

// TestForwardedKeysNoSpoofing: over a real connection from 127.0.0.1.
// With the loopback untrusted, x-forwarded-for is never read; trusted, the
// first untrusted hop from the right is the key, forged hops to its left
// are not read however many there are, and a chain of more than
// MaxProxyHops trusted hops is InvalidArgument. forwarded is read only by
// KeyByForwarded.
func TestForwardedKeysNoSpoofing(t *testing.T) {
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	other := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	forged := strings.Repeat("6.6.6.6, ", 20000) // ~180 KB of forged hops
	for _, c := range []struct {
		name string
		key  Key
		md   []string
		want string
		code codes.Code
	}{
		{"untrusted peer: xff ignored", KeyByXForwardedFor(other, 64), []string{"x-forwarded-for", "203.0.113.5"}, "127.0.0.1", codes.OK},
		{"trusted peer, one hop", KeyByXForwardedFor(loop, 64), []string{"x-forwarded-for", "203.0.113.5"}, "203.0.113.5", codes.OK},
		{"forged left hops unread", KeyByXForwardedFor(loop, 64), []string{"x-forwarded-for", forged + "203.0.113.5, 127.0.0.9"}, "203.0.113.5", codes.OK},
		{"two lines, last walked first", KeyByXForwardedFor(loop, 64), []string{"x-forwarded-for", "6.6.6.6", "x-forwarded-for", "203.0.113.6"}, "203.0.113.6", codes.OK},
		{"missing metadata: the trusted peer", KeyByXForwardedFor(loop, 64), nil, "127.0.0.1", codes.OK},
		{"IPv6 client by /64", KeyByXForwardedFor(loop, 64), []string{"x-forwarded-for", "2001:db8:a:b::1"}, "2001:db8:a:b::/64", codes.OK},
		{"garbage", KeyByXForwardedFor(loop, 64), []string{"x-forwarded-for", "garbage"}, "", codes.InvalidArgument},
		{"too many trusted hops", KeyByXForwardedFor(loop, 64), []string{"x-forwarded-for", "203.0.113.5" + strings.Repeat(", 127.0.0.2", httplimit.MaxProxyHops)}, "", codes.InvalidArgument},
		{"xff key ignores forwarded", KeyByXForwardedFor(loop, 64), []string{"forwarded", "for=203.0.113.7"}, "127.0.0.1", codes.OK},
		{"forwarded", KeyByForwarded(loop, 64), []string{"forwarded", `for=6.6.6.6, for="203.0.113.7:99";proto=https`}, "203.0.113.7", codes.OK},
		{"forwarded ignores xff", KeyByForwarded(loop, 64), []string{"x-forwarded-for", "203.0.113.5"}, "127.0.0.1", codes.OK},
		{"forwarded unknown", KeyByForwarded(loop, 64), []string{"forwarded", "for=unknown"}, "", codes.InvalidArgument},
		{"forwarded, untrusted peer", KeyByForwarded(other, 64), []string{"forwarded", "for=203.0.113.7"}, "127.0.0.1", codes.OK},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{}
			cc := serveUnary(t, mustInterceptorT(t, rec, WithKey(c.key)))
			ctx := context.Background()
			if c.md != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, c.md...)
			}
			r := say(t, cc, ctx, mSay)
			if r.code != c.code || rec.last() != c.want {
				t.Errorf("%v %q, key %q; want %v, key %q", r.code, r.msg, rec.last(), c.code, c.want)
			}
		})
	}
}

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
		{e, []Option{WithPolicy("", 0)}, "grpclimit: WithPolicy name = \"\""},
		{e, []Option{WithPolicy("p", 1)}, "grpclimit: WithPolicy window = 1ns, but the limiter's Config().Window = 10s"},
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
