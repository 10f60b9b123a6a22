package grpclimit

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

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
			rec := &adaptertest.Recorder{}
			cc := serveUnary(t, mustInterceptorT(t, rec, WithKey(c.key)))
			ctx := context.Background()
			if c.md != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, c.md...)
			}
			r := say(t, cc, ctx, mSay)
			if r.code != c.code || rec.Last() != c.want {
				t.Errorf("%v %q, key %q; want %v, key %q", r.code, r.msg, rec.Last(), c.code, c.want)
			}
		})
	}
}
