package httplimit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

var (
	testTrusted     = mustPrefixes("10.0.0.0/8", "fd00::/8")
	netipPrefixZero netip.Prefix
)

func mustPrefixes(ps ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func xff(v ...string) http.Header { return http.Header{"X-Forwarded-For": v} }
func fwd(v ...string) http.Header { return http.Header{"Forwarded": v} }

func TestKeyByXForwardedFor(t *testing.T) {
	k := KeyByXForwardedFor(testTrusted, 64)
	for _, c := range []struct {
		name, remote string
		hdr          http.Header
		want         string
	}{
		{"untrusted peer: headers ignored", "198.51.100.9:1", xff("1.2.3.4"), "198.51.100.9"},
		{"trusted proxy, one hop", "10.0.0.1:1", xff("203.0.113.5"), "203.0.113.5"},
		{"client-written left entries are not read", "10.0.0.1:1", xff("1.2.3.4, 203.0.113.5, 10.0.0.2"), "203.0.113.5"},
		{"split over two lines", "10.0.0.1:1", xff("1.2.3.4", "203.0.113.5"), "203.0.113.5"},
		{"the last line is walked first", "10.0.0.1:1", xff("203.0.113.5, 10.0.0.3", "10.0.0.2"), "203.0.113.5"},
		{"empty members and spaces", "10.0.0.1:1", xff(" , 203.0.113.5 ,, \t", ""), "203.0.113.5"},
		{"all trusted: the leftmost", "10.0.0.1:1", xff("10.1.1.1, 10.0.0.2"), "10.1.1.1"},
		{"trusted peer without the header: the peer", "10.0.0.1:1", nil, "10.0.0.1"},
		{"only empty members: the peer", "10.0.0.1:1", xff(" , "), "10.0.0.1"},
		{"Forwarded is never read", "10.0.0.1:1", http.Header{"Forwarded": {"for=198.51.100.7"}, "X-Forwarded-For": {"203.0.113.9"}}, "203.0.113.9"},
		{"Forwarded alone is never read", "10.0.0.1:1", fwd("for=198.51.100.7"), "10.0.0.1"},
		{"empty Forwarded does not make the proxy the key", "10.0.0.1:1", http.Header{"Forwarded": {""}, "X-Forwarded-For": {"203.0.113.9"}}, "203.0.113.9"},
		{"a hop with a port", "10.0.0.1:1", xff("203.0.113.5:4711"), "203.0.113.5"},
		{"IPv6 hop grouped by /64", "[fd00::1]:1", xff("2001:db8:a:b::1"), "2001:db8:a:b::/64"},
		{"bracketed IPv6 hop with port", "[fd00::1]:1", xff("[2001:db8:a:b::1]:443"), "2001:db8:a:b::/64"},
		{"mapped peer and hop", "[::ffff:10.0.0.1]:1", xff("::ffff:203.0.113.5"), "203.0.113.5"},
	} {
		if got := keyOf(t, k, c.remote, c.hdr); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		name, remote string
		hdr          http.Header
		want         string
	}{
		{"garbage written by a trusted hop", "10.0.0.1:1", xff("garbage"), `httplimit: X-Forwarded-For: unparsable address "garbage"`},
		{"garbage right of the client", "10.0.0.1:1", xff("203.0.113.5, unknown"), `httplimit: X-Forwarded-For: unparsable address "unknown"`},
		{"unparsable peer", "@", nil, `httplimit: cannot parse client address "@"`},
	} {
		if err := keyErr(t, k, c.remote, c.hdr); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// A mapped trusted prefix trusts the IPv4 addresses it maps.
	km := KeyByXForwardedFor(mustPrefixes("::ffff:10.0.0.0/104"), 64)
	if got := keyOf(t, km, "10.0.0.1:1", xff("203.0.113.5")); got != "203.0.113.5" {
		t.Errorf("mapped prefix: %q", got)
	}
}

func TestKeyByForwarded(t *testing.T) {
	k := KeyByForwarded(testTrusted, 64)
	for _, c := range []struct {
		name, remote string
		hdr          http.Header
		want         string
	}{
		{"untrusted peer: headers ignored", "198.51.100.9:1", fwd("for=1.2.3.4"), "198.51.100.9"},
		{"chain", "10.0.0.1:1", fwd(`for=1.2.3.4;proto=https, for="[2001:db8:a:b::1]:443";by=10.0.0.3, for=10.0.0.2`), "2001:db8:a:b::/64"},
		{"X-Forwarded-For is never read", "10.0.0.1:1", http.Header{"Forwarded": {"for=203.0.113.8"}, "X-Forwarded-For": {"203.0.113.9"}}, "203.0.113.8"},
		{"X-Forwarded-For alone is never read", "10.0.0.1:1", xff("203.0.113.9"), "10.0.0.1"},
		{"port, quotes and case", "[fd00::1]:1", fwd(`For="203.0.113.7:4711"`), "203.0.113.7"},
		{"comma inside a quoted value", "10.0.0.1:1", fwd(`for=198.51.100.1, for=203.0.113.7;host="a,b", for=10.0.0.9`), "203.0.113.7"},
		{"escaped quote inside a quoted value", "10.0.0.1:1", fwd(`for=198.51.100.1, for=203.0.113.7;host="a\",b\\", for=10.0.0.9`), "203.0.113.7"},
		{"unterminated quote left of the client is not read", "10.0.0.1:1", fwd(`for="1.2.3.4, for=203.0.113.7`), "203.0.113.7"},
		{"elements over two lines", "10.0.0.1:1", fwd(`for=198.51.100.1`, `for=203.0.113.7;proto=http`), "203.0.113.7"},
		{"empty elements skipped", "10.0.0.1:1", fwd(`for=203.0.113.7, , `), "203.0.113.7"},
		{"empty header from a trusted peer: the peer", "10.0.0.1:1", fwd(""), "10.0.0.1"},
		{"all trusted: the leftmost", "10.0.0.1:1", fwd("for=10.1.1.1, for=10.0.0.2"), "10.1.1.1"},
		// RFC 7239 section 6.3: an obfuscated port is keyed by its address,
		// as a numeric port is; a trusted hop with one is walked past.
		{"obfuscated port, IPv4", "10.0.0.1:1", fwd(`for="203.0.113.5:_abc"`), "203.0.113.5"},
		{"obfuscated port, IPv6", "10.0.0.1:1", fwd(`for="[2001:db8::1]:_port"`), "2001:db8::/64"},
		{"obfuscated port, every allowed character", "10.0.0.1:1", fwd(`for="203.0.113.5:_aZ0.-_"`), "203.0.113.5"},
		{"obfuscated port on a trusted hop", "10.0.0.1:1", fwd(`for="203.0.113.5:80", for="10.0.0.2:_lb"`), "203.0.113.5"},
	} {
		if got := keyOf(t, k, c.remote, c.hdr); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		hdr  http.Header
		want string
	}{
		{"element without for=", fwd("for=203.0.113.7, proto=https;by=10.0.0.3"), `httplimit: Forwarded: no for= parameter in element "proto=https;by=10.0.0.3"`},
		{"two for=", fwd("for=10.0.0.4;for=203.0.113.1"), `httplimit: Forwarded: two for= parameters in element "for=10.0.0.4;for=203.0.113.1"`},
		{"unknown", fwd("for=unknown"), `httplimit: Forwarded: unparsable address "unknown"`},
		{"obfuscated", fwd("for=_hidden"), `httplimit: Forwarded: unparsable address "_hidden"`},
		{"obfuscated node with an obfuscated port", fwd(`for="_hidden:_port"`), `httplimit: Forwarded: unparsable address "_hidden:_port"`},
		{"empty obfuscated port", fwd(`for="203.0.113.5:_"`), `httplimit: Forwarded: unparsable address "203.0.113.5:_"`},
		{"bad character in an obfuscated port", fwd(`for="203.0.113.5:_a b"`), `httplimit: Forwarded: unparsable address "203.0.113.5:_a b"`},
		{"obfuscated port on bare IPv6", fwd(`for="2001:db8::1:_port"`), `httplimit: Forwarded: unparsable address "2001:db8::1:_port"`},
		{"quoted-pair in an address", fwd(`for="10.0.0.\5"`), `httplimit: Forwarded: unparsable address "10.0.0.\5"`},
		{"unterminated quote in the part read", fwd(`for=203.0.113.7;host="a`), "httplimit: Forwarded: unterminated quoted string"},
	} {
		if err := keyErr(t, k, "10.0.0.1:1", c.hdr); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestForgedChainCostsNothingLeftOfTheClient: 10,000 forged hops, some
// unparsable, to the left of the client are never read: the key is right,
// no error, and the walk allocates only the key's own copy (16 bytes; see
// TestHopKeyDoesNotPinAPaddedHeader). It used to split the whole chain:
// ~1.2 ms and 666 KB per request.
func TestForgedChainCostsNothingLeftOfTheClient(t *testing.T) {
	forged := strings.Repeat("1.1.1.1, not-an-ip, ", 5000)
	for _, c := range []struct {
		k   Key
		hdr http.Header
	}{
		{KeyByXForwardedFor(testTrusted, 64), xff(forged + "203.0.113.5, 10.0.0.2, 10.0.0.3")},
		{KeyByForwarded(testTrusted, 64), fwd(strings.Repeat(`for="unterminated, for=1.1.1.1;x="a,b", `, 5000) + `for=203.0.113.5, for=10.0.0.2;proto=https, for=10.0.0.3`)},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:4711"
		for name, vs := range c.hdr {
			r.Header[name] = vs
		}
		key, err := c.k.Of(r)
		if err != nil || key != "203.0.113.5" {
			t.Fatalf("%v: %q %v", c.hdr, key, err)
		}
		var key2 string
		if a := testing.AllocsPerRun(100, func() { key2, _ = c.k.Of(r) }); a != 1 || len(key2) != len(key) {
			t.Errorf("%v allocations per key, want 1 (the key's copy)", a)
		}
	}
}

// TestHopCap: the client must be among the MaxProxyHops rightmost hops.
func TestHopCap(t *testing.T) {
	trustedHops := func(n int) string {
		hops := make([]string, n)
		for i := range hops {
			hops[i] = "10.0.0." + strconv.Itoa(i+1)
		}
		return strings.Join(hops, ", ")
	}
	e, _ := newEngine(t, engine.Config{})
	for _, c := range []struct {
		name string
		k    Key
		hdr  http.Header
		err  string
	}{
		{"X-Forwarded-For", KeyByXForwardedFor(testTrusted, 64), xff("203.0.113.5, " + trustedHops(MaxProxyHops)), "httplimit: X-Forwarded-For has more than 16 hops from trusted proxies\n"},
		{"Forwarded", KeyByForwarded(testTrusted, 64), fwd("for=203.0.113.5, for=" + strings.ReplaceAll(trustedHops(MaxProxyHops), ", ", ", for=")), "httplimit: Forwarded has more than 16 hops from trusted proxies\n"},
	} {
		m := mustMiddleware(t, e, WithKey(c.k))
		h := m.Handler(okHandler)
		w := do(h, "10.0.0.100:1", func(r *http.Request) {
			for name, vs := range c.hdr {
				r.Header[name] = vs
			}
		})
		if w.Code != http.StatusBadRequest || w.Body.String() != c.err {
			t.Errorf("%s: %d %q, want 400 %q", c.name, w.Code, w.Body.String(), c.err)
		}
		if s := m.Stats(); s != (Stats{Rejected: 1}) {
			t.Errorf("%s: %+v", c.name, s)
		}
	}
	k := KeyByXForwardedFor(testTrusted, 64)
	// MaxProxyHops − 1 trusted hops and the client: found.
	if got := keyOf(t, k, "10.0.0.100:1", xff("1.2.3.4, 203.0.113.5, "+trustedHops(MaxProxyHops-1))); got != "203.0.113.5" {
		t.Errorf("client at hop %d: %q", MaxProxyHops, got)
	}
	// Exactly MaxProxyHops trusted hops and nothing more: the leftmost.
	if got := keyOf(t, k, "10.0.0.100:1", xff(trustedHops(MaxProxyHops))); got != "10.0.0.1" {
		t.Errorf("all %d trusted: %q", MaxProxyHops, got)
	}
}

// TestSpoofedForwardedBehindAnXFFProxy is a key-spoofing attack over real
// connections (the forged Forwarded chose the key before): a client (127.0.0.2) talks to a reverse proxy that appends
// its peer to X-Forwarded-For and passes Forwarded on, as nginx does by
// default; the proxy connects to the limited server from 127.0.0.3, the
// one trusted address. The client rotates Forwarded: for= and a forged
// X-Forwarded-For, and is still one client: limited after 2.
func TestSpoofedForwardedBehindAnXFFProxy(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: engine.FixedWindow})
	m := mustMiddleware(t, e, WithKey(KeyByXForwardedFor(mustPrefixes("127.0.0.3/32"), 64)))
	var seen []string
	backend := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("X-Forwarded-For"))
		_, _ = w.Write([]byte("ok"))
	})))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	proxy := httputil.NewSingleHostReverseProxy(target) // Director: appends the peer to X-Forwarded-For
	proxy.Transport = &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}).DialContext}
	front := httptest.NewServer(proxy)
	defer front.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext(ctx, network, addr)
	}}}
	defer client.CloseIdleConnections()

	var codes []int
	for i := range 5 {
		resp, _ := get(t, client, front.URL, map[string]string{
			"Forwarded":       "for=198.51.100." + strconv.Itoa(i),
			"X-Forwarded-For": "203.0.113." + strconv.Itoa(i),
		})
		codes = append(codes, resp.StatusCode)
		if i == 4 {
			wantHeader(t, resp.Header, "RateLimit", `"default";r=0;t=10`)
		}
	}
	if want := []int{200, 200, 429, 429, 429}; !slices.Equal(codes, want) {
		t.Fatalf("codes %v, want %v (the forged headers chose the key)", codes, want)
	}
	if len(seen) != 2 || seen[0] != "203.0.113.0, 127.0.0.2" {
		t.Fatalf("the backend saw X-Forwarded-For %q", seen)
	}
}

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

// TestZonedProxyAddressesAreTrusted: netip's Contains is false for an
// address with a zone, so a zoned trusted proxy (fe80::1%eth0 in
// fe80::/10) was taken for the client.
func TestZonedProxyAddressesAreTrusted(t *testing.T) {
	k := KeyByXForwardedFor(mustPrefixes("fe80::/10"), 64)
	if got := keyOf(t, k, "[fe80::1%eth0]:443", xff("203.0.113.5")); got != "203.0.113.5" {
		t.Errorf("zoned trusted peer: %q", got)
	}
	if got := keyOf(t, k, "[fe80::1%eth0]:443", xff("203.0.113.5, fe80::2%eth0")); got != "203.0.113.5" {
		t.Errorf("zoned trusted hop: %q", got)
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

// TestProxyChainMatchesKey: adapter.ProxyChain.Key (what grpclimit's keys
// run) gives the key (or the error) that KeyByXForwardedFor and
// KeyByForwarded give for the same peer and header lines.
func TestProxyChainMatchesKey(t *testing.T) {
	xc, err := adapter.NewProxyChain("httplimit: ", "KeyByXForwardedFor", "X-Forwarded-For", testTrusted, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := adapter.NewProxyChain("httplimit: ", "KeyByForwarded", "Forwarded", testTrusted, 56, true)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("10.0.0.1, ", MaxProxyHops) + "203.0.113.5"
	for _, c := range []struct {
		remote string
		lines  []string
	}{
		{"198.51.100.9:1", []string{"1.2.3.4"}},
		{"10.0.0.1:1", []string{"1.2.3.4, 203.0.113.5, 10.0.0.2"}},
		{"10.0.0.1:1", []string{"203.0.113.5, 10.0.0.3", "10.0.0.2"}},
		{"10.0.0.1:1", nil},
		{"10.0.0.1:1", []string{" , "}},
		{"[fd00::1]:1", []string{"2001:db8:a:b::1"}},
		{"[::ffff:10.0.0.1]:1", []string{"::ffff:203.0.113.5"}},
		{"10.0.0.1:1", []string{"garbage"}},
		{"10.0.0.1:1", []string{long}},
		{"10.0.0.1:1", []string{`for=198.51.100.7;proto=https, for="[2001:db8:a:b::1]:4711"`}},
		{"10.0.0.1:1", []string{`for=unknown`}},
		{"10.0.0.1:1", []string{`for="1.2.3.4, for=10.0.0.2`}},
		{"10.0.0.1:1", []string{strings.Repeat("x", 100) + ", 203.0.113.77"}},
	} {
		peer := netip.MustParseAddrPort(c.remote).Addr()
		for _, p := range []struct {
			chain adapter.ProxyChain
			key   Key
			hdr   string
		}{
			{xc, KeyByXForwardedFor(testTrusted, 64), "X-Forwarded-For"},
			{fc, KeyByForwarded(testTrusted, 56), "Forwarded"},
		} {
			got, gotErr := p.chain.Key(peer.Unmap().WithZone(""), "", c.lines)
			r, _ := http.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.remote
			if c.lines != nil {
				r.Header[p.hdr] = c.lines
			}
			want, wantErr := p.key.Of(r)
			if got != want || errText(gotErr) != errText(wantErr) {
				t.Errorf("%s from %s %q: Key = %q, %v; the Key's Of = %q, %v", p.hdr, c.remote, c.lines, got, gotErr, want, wantErr)
			}
		}
	}
	if _, err := adapter.NewProxyChain("httplimit: ", "KeyByXForwardedFor", "X-Forwarded-For", nil, 64, false); err == nil || !strings.Contains(err.Error(), "KeyByXForwardedFor trusted is empty") {
		t.Errorf("no trusted prefixes: %v", err)
	}
	if _, err := adapter.NewProxyChain("httplimit: ", "KeyByForwarded", "Forwarded", testTrusted, 129, true); err == nil || !strings.Contains(err.Error(), "KeyByForwarded ipv6Prefix = 129") {
		t.Errorf("ipv6Prefix 129: %v", err)
	}
}
