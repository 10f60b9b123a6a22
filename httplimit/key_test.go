package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

func keyOf(t *testing.T, k KeyFunc, remote string, hdr http.Header) string {
	t.Helper()
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for name, vs := range hdr {
		r.Header[name] = vs
	}
	s, err := k(r)
	if err != nil {
		t.Fatalf("key(%q, %v): %v", remote, hdr, err)
	}
	return s
}

func TestKeyByIP(t *testing.T) {
	k := KeyByIP(0) // default /64
	for remote, want := range map[string]string{
		"192.0.2.7:443":            "192.0.2.7",
		"[::ffff:192.0.2.7]:443":   "192.0.2.7",
		"[2001:db8:1:2:aa::1]:443": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:443":       "fe80::/64",
		"2001:db8::5":              "2001:db8::/64",
	} {
		if got := keyOf(t, k, remote, nil); got != want {
			t.Errorf("%s: %q, want %q", remote, got, want)
		}
	}
	if got := keyOf(t, KeyByIP(128), "[2001:db8::1]:1", nil); got != "2001:db8::1" {
		t.Errorf("/128: %q", got)
	}
	if _, err := k(&http.Request{RemoteAddr: "@"}); err == nil {
		t.Error("no error for an unparsable RemoteAddr")
	}
}

func TestIPv6Slash64Grouping(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2})
	h := New(e)(okHandler)
	do(h, "[2001:db8:0:1::a]:1", nil)
	do(h, "[2001:db8:0:1:ffff::b]:1", nil) // same /64: shares the window
	if w := do(h, "[2001:db8:0:1::c]:1", nil); w.Code != 429 {
		t.Fatalf("same /64: %d, want 429", w.Code)
	}
	if w := do(h, "[2001:db8:0:2::a]:1", nil); w.Code != 200 {
		t.Fatalf("other /64: %d, want 200", w.Code)
	}
}

func TestKeyByRealIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	k := KeyByRealIP(trusted, 64)
	xff := func(v ...string) http.Header { return http.Header{"X-Forwarded-For": v} }
	fwd := func(v ...string) http.Header { return http.Header{"Forwarded": v} }
	for _, c := range []struct {
		name, remote string
		hdr          http.Header
		want         string
	}{
		{"spoofed XFF from an untrusted peer is ignored", "198.51.100.9:1", xff("1.2.3.4"), "198.51.100.9"},
		{"spoofed Forwarded from an untrusted peer is ignored", "198.51.100.9:1", fwd("for=1.2.3.4"), "198.51.100.9"},
		{"trusted proxy, XFF used", "10.0.0.1:1", xff("203.0.113.5"), "203.0.113.5"},
		{"client-supplied left entries are skipped", "10.0.0.1:1", xff("1.2.3.4, 203.0.113.5, 10.0.0.2"), "203.0.113.5"},
		{"XFF split over two lines", "10.0.0.1:1", xff("1.2.3.4", "203.0.113.5"), "203.0.113.5"},
		{"all trusted: leftmost", "10.0.0.1:1", xff("10.1.1.1, 10.0.0.2"), "10.1.1.1"},
		{"trusted peer without headers", "10.0.0.1:1", nil, "10.0.0.1"},
		{"Forwarded chain", "10.0.0.1:1", fwd(`for=1.2.3.4;proto=https, for="[2001:db8:a:b::1]:443";by=10.0.0.3, for=10.0.0.2`), "2001:db8:a:b::/64"},
		{"Forwarded over XFF", "10.0.0.1:1", http.Header{"Forwarded": {"for=203.0.113.8"}, "X-Forwarded-For": {"203.0.113.9"}}, "203.0.113.8"},
		{"Forwarded with ports and case", "[fd00::1]:1", fwd(`For="203.0.113.7:4711"`), "203.0.113.7"},
	} {
		if got := keyOf(t, k, c.remote, c.hdr); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	r.Header.Set("X-Forwarded-For", "garbage")
	if _, err := k(r); err == nil {
		t.Error("unparsable hop from a trusted proxy: no error")
	}
	if got := keyOf(t, KeyByRealIP(nil, 64), "10.0.0.1:1", xff("1.2.3.4")); got != "10.0.0.1" {
		t.Errorf("no trusted prefixes: %q", got)
	}
}

func TestKeyByHeaderRouteCompose(t *testing.T) {
	k := KeyByHeader("x-tenant", MissingFallback(KeyByIP(64)))
	if got := keyOf(t, k, "192.0.2.1:1", http.Header{"X-Tenant": {" acme "}}); got != "acme" {
		t.Errorf("header: %q", got)
	}
	if got := keyOf(t, k, "192.0.2.1:1", nil); got != "192.0.2.1" {
		t.Errorf("fallback: %q", got)
	}
	c := Compose(KeyByHeader("X-Tenant", MissingReject), KeyByIP(64))
	if got := keyOf(t, c, "192.0.2.1:1", http.Header{"X-Tenant": {"acme"}}); got != "acme\x00192.0.2.1" {
		t.Errorf("compose: %q", got)
	}
	rk := KeyByRoute(func(*http.Request) string { return "GET /items/{id}" }, KeyByIP(64))
	if got := keyOf(t, rk, "192.0.2.1:1", nil); got != "GET /items/{id}\x00192.0.2.1" {
		t.Errorf("route: %q", got)
	}
	if _, err := KeyByRoute(nil, KeyByIP(64))(httptest.NewRequest("GET", "/", nil)); err == nil {
		t.Error("KeyByRoute(nil) without r.Pattern: no error")
	}
	// With nil routeFunc, r.Pattern from ServeMux.
	e, _ := newEngine(t, engine.Config{Limit: 1})
	lim := New(e, WithKey(KeyByRoute(nil, KeyByIP(64))))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", lim(okHandler))
	mux.Handle("GET /other", lim(okHandler))
	serve := func(path string) int {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.1:1"
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}
	if a, b, c := serve("/items/1"), serve("/items/2"), serve("/other"); a != 200 || b != 429 || c != 200 {
		t.Fatalf("per-pattern: %d %d %d, want 200 429 200", a, b, c)
	}
}

func TestKeyByIPv4CostsNoAllocation(t *testing.T) {
	k := KeyByIP(64)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.7:51234"
	key, err := k(r)
	require.NoError(t, err)
	require.Equal(t, "192.0.2.7", key)
	allocs := testing.AllocsPerRun(100, func() { _, _ = k(r) })
	require.Zero(t, allocs)
	// A non-canonical form is not taken as is.
	r.RemoteAddr = "[::ffff:192.0.2.7]:51234"
	key, err = k(r)
	require.NoError(t, err)
	require.Equal(t, "192.0.2.7", key, "an IPv4-mapped address is the IPv4 key")
}

func TestBadPrefixIsAnErrorNamingIt(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.7:51234"
	for _, k := range []KeyFunc{KeyByIP(200), KeyByIP(-1), KeyByRealIP(nil, 129)} {
		_, err := k(r)
		require.ErrorContains(t, err, "ipv6Prefix")
		require.ErrorContains(t, err, "want 1 … 128")
	}
}
