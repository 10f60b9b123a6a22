package httplimit

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit/engine"
)

// within reports whether s's bytes lie inside big's.
func within(s, big string) bool {
	p, b := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(big)))
	return p >= b && p < b+uintptr(len(big))
}

// TestHopKeyDoesNotPinAPaddedHeader: the engine keeps the key string for
// the key's lifetime, so a key that is a substring of a 100 KB forged
// header line would keep the whole line alive, per client IP.
func TestHopKeyDoesNotPinAPaddedHeader(t *testing.T) {
	for _, c := range []struct {
		k    Key
		name string
		line string
	}{
		{KeyByXForwardedFor(testTrusted, 64), "X-Forwarded-For", strings.Repeat("1.1.1.1, ", 10_000) + "203.0.113.5"},
		{KeyByForwarded(testTrusted, 64), "Forwarded", strings.Repeat("for=1.1.1.1, ", 10_000) + "for=203.0.113.5"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:1"
		r.Header[c.name] = []string{c.line}
		key, err := c.k.Of(r)
		if err != nil || key != "203.0.113.5" {
			t.Fatalf("%s: %q %v", c.name, key, err)
		}
		if within(key, c.line) {
			t.Errorf("%s: the key is a substring of the %d-byte header line", c.name, len(c.line))
		}
	}
	// A short line is shared, at no allocation (TestForgedChain… covers
	// the allocation count for the walk itself).
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	line := "203.0.113.5, 10.0.0.2"
	r.Header["X-Forwarded-For"] = []string{line}
	if key, _ := KeyByXForwardedFor(testTrusted, 64).Of(r); key != "203.0.113.5" || !within(key, line) {
		t.Errorf("short line: %q copied", key)
	}
}

// TestZonedAddresses: netip's Contains is false for an address with a
// zone, so a zoned trusted proxy was taken for the client.
func TestZonedAddresses(t *testing.T) {
	k := KeyByXForwardedFor(mustPrefixes("fe80::/10"), 64)
	if got := keyOf(t, k, "[fe80::1%eth0]:443", xff("203.0.113.5")); got != "203.0.113.5" {
		t.Errorf("zoned trusted peer: %q", got)
	}
	if got := keyOf(t, k, "[fe80::1%eth0]:443", xff("203.0.113.5, fe80::2%eth0")); got != "203.0.113.5" {
		t.Errorf("zoned trusted hop: %q", got)
	}
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

// TestConfiguredWindowZero: a limiter whose Config reports no window
// would have advertised t=0 ("the quota is free now") on every admitted
// response.
func TestConfiguredWindowZero(t *testing.T) {
	f := &configuredRemote{fakeRemote: fakeRemote{next: func(string, int64) (engine.Decision, error) {
		return engine.Decision{Allowed: true, Limit: 7, Remaining: 6}, nil
	}}}
	_, err := NewMiddleware(f)
	if err == nil || err.Error() != "httplimit: NewMiddleware: the limiter's Config().Window = 0s, want > 0" {
		t.Fatalf("%v", err)
	}
}

// TestPolicyCacheConcurrent races the policy cache across limits that
// share slots, under -race.
func TestPolicyCacheConcurrent(t *testing.T) {
	const policySlots = 8 // the size of the policy cache (internal/adapter)
	f := &fakeRemote{next: func(key string, _ int64) (engine.Decision, error) {
		l := int64(len(key)) * policySlots // limits 8, 16, 24, …: all in slot 0
		return engine.Decision{Allowed: true, Limit: l, Remaining: l - 1}, nil
	}}
	m := mustMiddleware(t, f, WithKey(KeyByHeader("K", MissingReject)), WithPolicy("p", time.Second))
	h := m.Handler(okHandler)
	var wg sync.WaitGroup
	errc := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := strings.Repeat("k", g+1)
			want := `"p";q=` + strconv.Itoa((g+1)*policySlots) + ";w=1"
			for range 500 {
				w := httptest.NewRecorder()
				r := httptest.NewRequest("GET", "/", nil)
				r.Header.Set("K", key)
				h.ServeHTTP(w, r)
				if got := w.Header().Get("RateLimit-Policy"); got != want {
					errc <- got + " != " + want
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for e := range errc {
		t.Error(e)
	}
}

// TestEmptyMembersCountTowardTheCap: empty list members were skipped
// without counting, so ", , , …" from a trusted peer made the walk read
// arbitrarily many members. Every member read counts toward MaxProxyHops.
func TestEmptyMembersCountTowardTheCap(t *testing.T) {
	k := KeyByXForwardedFor(testTrusted, 64)
	err := keyErr(t, k, "10.0.0.1:1", xff("203.0.113.5"+strings.Repeat(", ", 100_000)))
	if err == nil || err.Error() != "httplimit: X-Forwarded-For has more than 16 hops from trusted proxies" {
		t.Fatalf("%v", err)
	}
	err = keyErr(t, KeyByForwarded(testTrusted, 64), "10.0.0.1:1", fwd("for=203.0.113.5"+strings.Repeat(",", 100_000)))
	if err == nil || err.Error() != "httplimit: Forwarded has more than 16 hops from trusted proxies" {
		t.Fatalf("%v", err)
	}
	// A few are fine (the list syntax allows them).
	if got := keyOf(t, k, "10.0.0.1:1", xff("203.0.113.5, , 10.0.0.2,")); got != "203.0.113.5" {
		t.Fatalf("%q", got)
	}
}
