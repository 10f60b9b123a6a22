package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

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
	if _, err := k.Of(&http.Request{RemoteAddr: "@"}); err == nil {
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

func TestKeyByHeaderRouteCompose(t *testing.T) {
	k := KeyByHeader("x-tenant", MissingFallback(KeyByIP(64)))
	if got := keyOf(t, k, "192.0.2.1:1", http.Header{"X-Tenant": {" acme "}}); got != "acme" {
		t.Errorf("header: %q", got)
	}
	if got := keyOf(t, k, "192.0.2.1:1", nil); got != "192.0.2.1" {
		t.Errorf("fallback: %q", got)
	}
	if got := keyOf(t, k, "192.0.2.1:1", http.Header{"X-Tenant": {"  "}}); got != "192.0.2.1" {
		t.Errorf("blank header, fallback: %q", got)
	}
	c := Compose(KeyByHeader("X-Tenant", MissingReject), KeyByIP(64))
	if got := keyOf(t, c, "192.0.2.1:1", http.Header{"X-Tenant": {"acme"}}); got != "acme\x00192.0.2.1" {
		t.Errorf("compose: %q", got)
	}
	rk := KeyByRoute(func(*http.Request) string { return "GET /items/{id}" }, KeyByIP(64))
	if got := keyOf(t, rk, "192.0.2.1:1", nil); got != "GET /items/{id}\x00192.0.2.1" {
		t.Errorf("route: %q", got)
	}
	// Outside a mux, RoutePattern is "": a route like any other, not an error.
	if got := keyOf(t, KeyByRoute(RoutePattern, KeyByIP(64)), "192.0.2.1:1", nil); got != "\x00192.0.2.1" {
		t.Errorf("no pattern: %q", got)
	}
	// Inside the mux's handlers, r.Pattern is the matched pattern.
	e, _ := newEngine(t, engine.Config{Limit: 1})
	lim := New(e, WithKey(KeyByRoute(RoutePattern, KeyByIP(64))))
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
	key, err := k.Of(r)
	require.NoError(t, err)
	require.Equal(t, "192.0.2.7", key)
	allocs := testing.AllocsPerRun(100, func() { _, _ = k.Of(r) })
	require.Zero(t, allocs)
	// A non-canonical form is not taken as is.
	r.RemoteAddr = "[::ffff:192.0.2.7]:51234"
	key, err = k.Of(r)
	require.NoError(t, err)
	require.Equal(t, "192.0.2.7", key, "an IPv4-mapped address is the IPv4 key")
}

// TestIPv6PeerKeyAllocatesOnce: an IPv6 peer's key is one string (the
// masked prefix); parsing it must not also allocate a parse error.
func TestIPv6PeerKeyAllocatesOnce(t *testing.T) {
	k := KeyByIP(64)
	r := httptest.NewRequest("GET", "/", nil)
	for _, remote := range []string{"[2001:db8:1:2::7]:443", "[::ffff:192.0.2.7]:443"} {
		r.RemoteAddr = remote
		// One: the masked prefix's String, or the unmapped IPv4 address's.
		if a := testing.AllocsPerRun(100, func() { _, _ = k.Of(r) }); a > 1 {
			t.Errorf("%s: %v allocations, want ≤ 1", remote, a)
		}
	}
}
