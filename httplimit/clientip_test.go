package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/ringlimit/ringlimit/engine"
)

// TestKeyByClientIPHeader: the header is read only from a trusted peer,
// and only when it holds exactly one address; every other case keys by the
// peer or is a request error, never a key the client chose.
func TestKeyByClientIPHeader(t *testing.T) {
	for _, header := range []string{HeaderXRealIP, HeaderTrueClientIP, HeaderCFConnectingIP, HeaderFlyClientIP} {
		k := KeyByClientIPHeader(header, testTrusted, 64)
		if err := k.Err(); err != nil {
			t.Fatal(err)
		}
		h := func(v ...string) http.Header { return http.Header{http.CanonicalHeaderKey(header): v} }
		for _, c := range []struct {
			name, remote string
			hdr          http.Header
			want         string // the key, or the error's text after "httplimit: "
			isErr        bool
		}{
			{"untrusted peer: the header is ignored", "198.51.100.9:1", h("1.2.3.4"), "198.51.100.9", false},
			{"untrusted IPv6 peer: ignored, the peer's /64", "[2001:db8:1:2::9]:1", h("1.2.3.4"), "2001:db8:1:2::/64", false},
			{"untrusted peer, malformed header: still the peer, no error", "198.51.100.9:1", h("not an address", "x"), "198.51.100.9", false},
			{"trusted proxy", "10.0.0.1:1", h("203.0.113.5"), "203.0.113.5", false},
			{"trusted proxy, spaces", "10.0.0.1:1", h(" \t203.0.113.5 "), "203.0.113.5", false},
			{"a port", "10.0.0.1:1", h("203.0.113.5:4711"), "203.0.113.5", false},
			{"IPv6 grouped by /64", "[fd00::1]:1", h("2001:db8:a:b::1"), "2001:db8:a:b::/64", false},
			{"bracketed IPv6 with a port", "10.0.0.1:1", h("[2001:db8:a:b::1]:443"), "2001:db8:a:b::/64", false},
			{"bracketed IPv6", "10.0.0.1:1", h("[2001:db8:a:b::1]"), "2001:db8:a:b::/64", false},
			{"IPv6 with a zone: the zone is dropped", "10.0.0.1:1", h("fe80::1%eth0"), "fe80::/64", false},
			{"IPv4-mapped IPv6 counts as IPv4", "[::ffff:10.0.0.1]:1", h("::ffff:203.0.113.5"), "203.0.113.5", false},
			{"a trusted address in the header is the key", "10.0.0.1:1", h("10.9.9.9"), "10.9.9.9", false},
			{"trusted peer without the header: the peer", "10.0.0.1:1", nil, "10.0.0.1", false},
			{"X-Forwarded-For is never read", "10.0.0.1:1", xff("203.0.113.9"), "10.0.0.1", false},
			{"two lines", "10.0.0.1:1", h("1.2.3.4", "203.0.113.5"), "appears more than once", true},
			{"a list", "10.0.0.1:1", h("1.2.3.4, 203.0.113.5"), "holds a list", true},
			{"an empty list member", "10.0.0.1:1", h("203.0.113.5,"), "holds a list", true},
			{"empty", "10.0.0.1:1", h(""), "is empty", true},
			{"spaces only", "10.0.0.1:1", h(" \t "), "is empty", true},
			{"not an address", "10.0.0.1:1", h("unknown"), `unparsable address "unknown"`, true},
			{"a truncated IPv4", "10.0.0.1:1", h("1.2.3"), "unparsable address", true},
			{"a non-canonical IPv4", "10.0.0.1:1", h("001.002.003.004"), "unparsable address", true},
			{"a hostname with a port", "10.0.0.1:1", h("client.example:80"), "unparsable address", true},
			{"IPv6 with a port, unbracketed", "10.0.0.1:1", h("2001:db8::1:443x"), "unparsable address", true},
			{"a CIDR", "10.0.0.1:1", h("203.0.113.0/24"), "unparsable address", true},
			{"Forwarded syntax", "10.0.0.1:1", h("for=203.0.113.5"), "unparsable address", true},
			{"control characters are not echoed", "10.0.0.1:1", h("1.2.3.4\r\nX: y"), `unparsable address "1.2.3.4??X: y"`, true},
		} {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.remote
			r.Header = c.hdr
			key, err := k.Of(r)
			switch {
			case c.isErr && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "httplimit: "+header)):
				t.Errorf("%s, %s: %q, %v; want an error naming %s and containing %q", header, c.name, key, err, header, c.want)
			case !c.isErr && (err != nil || key != c.want):
				t.Errorf("%s, %s: %q, %v; want %q", header, c.name, key, err, c.want)
			}
		}
	}
}

// TestKeyByClientIPHeaderConfig: a mistake is a configuration error that
// names the helper, never a per-request answer.
func TestKeyByClientIPHeaderConfig(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	for _, c := range []struct {
		k    Key
		want string
	}{
		{KeyByClientIPHeader("X-Forwarded-For", testTrusted, 64), "use KeyByXForwardedFor or KeyByForwarded"},
		{KeyByClientIPHeader("forwarded", testTrusted, 64), "use KeyByXForwardedFor or KeyByForwarded"},
		{KeyByClientIPHeader("X Real IP", testTrusted, 64), "KeyByClientIPHeader header"},
		{KeyByClientIPHeader("", testTrusted, 64), "KeyByClientIPHeader header"},
		{KeyByClientIPHeader(HeaderXRealIP, nil, 64), "trusted is empty"},
		{KeyByClientIPHeader(HeaderXRealIP, mustPrefixes("0.0.0.0/0"), 64), "trusts every address"},
		{KeyByClientIPHeader(HeaderXRealIP, []netip.Prefix{netipPrefixZero}, 64), "not a valid prefix"},
		{KeyByClientIPHeader(HeaderXRealIP, testTrusted, 129), "ipv6Prefix = 129"},
	} {
		err := c.k.Err()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "KeyByClientIPHeader") {
			t.Errorf("%v, want an error naming KeyByClientIPHeader and containing %q", err, c.want)
		}
		if _, err := NewMiddleware(e, WithKey(c.k)); err == nil {
			t.Errorf("NewMiddleware accepted a Key with %v", c.k.Err())
		}
	}
}

// TestClientIPHeaderSpoofingThroughTheMiddleware: a client that connects
// directly and varies the header shares one window; behind the trusted
// proxy, each client has its own.
func TestClientIPHeaderSpoofingThroughTheMiddleware(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: engine.FixedWindow})
	h := New(e, WithKey(KeyByClientIPHeader(HeaderCFConnectingIP, mustPrefixes("173.245.48.0/20"), 64)))(okHandler)
	var codes []int
	for i := range 4 { // direct, each with another forged address
		codes = append(codes, do(h, "198.51.100.9:1", func(r *http.Request) {
			r.Header.Set(HeaderCFConnectingIP, "203.0.113."+string(rune('1'+i)))
		}).Code)
	}
	if want := []int{200, 200, 429, 429}; !slices.Equal(codes, want) {
		t.Errorf("direct client forging the header: %v, want %v", codes, want)
	}
	codes = codes[:0]
	for i := range 4 { // through the CDN, four clients
		codes = append(codes, do(h, "173.245.48.7:443", func(r *http.Request) {
			r.Header.Set(HeaderCFConnectingIP, "203.0.113."+string(rune('1'+i)))
		}).Code)
	}
	if want := []int{200, 200, 200, 200}; !slices.Equal(codes, want) {
		t.Errorf("four clients through the trusted CDN: %v, want %v", codes, want)
	}
	if w := do(h, "173.245.48.7:443", func(r *http.Request) {
		r.Header.Add(HeaderCFConnectingIP, "1.1.1.1")
		r.Header.Add(HeaderCFConnectingIP, "203.0.113.1")
	}); w.Code != 400 {
		t.Errorf("the header twice from the CDN: %d, want 400", w.Code)
	}
}

// TestClientIPHeaderKeyDoesNotPinAPaddedHeader: the key is a substring of
// a short header line (no allocation) and a copy of a long one, so a
// client cannot make the engine keep a padded line for the key's life.
func TestClientIPHeaderKeyDoesNotPinAPaddedHeader(t *testing.T) {
	k := KeyByClientIPHeader(HeaderXRealIP, testTrusted, 64)
	for _, c := range []struct {
		line   string
		shared bool
	}{
		{"203.0.113.5", true},
		{strings.Repeat(" ", 100) + "203.0.113.5", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:4711"
		r.Header.Set(HeaderXRealIP, c.line)
		line := r.Header.Get(HeaderXRealIP)
		key, err := k.Of(r)
		if err != nil || key != "203.0.113.5" {
			t.Fatalf("%q: %q %v", c.line, key, err)
		}
		start, end := uintptr(unsafe.Pointer(unsafe.StringData(line))), uintptr(unsafe.Pointer(unsafe.StringData(line)))+uintptr(len(line))
		p := uintptr(unsafe.Pointer(unsafe.StringData(key)))
		if shared := start <= p && p < end; shared != c.shared {
			t.Errorf("line of %d bytes: key shares its memory = %v, want %v", len(line), shared, c.shared)
		}
	}
}
