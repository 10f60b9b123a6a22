package grpclimit

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
