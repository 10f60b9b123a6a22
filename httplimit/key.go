package httplimit

import (
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// KeyFunc maps a request to its limiter key. An error refuses the request
// (400 by default, see WithKeyErrorHandler); it never falls back to a
// shared key.
type KeyFunc func(r *http.Request) (string, error)

// sep joins the parts of a composite key. Policies reads the part before
// the first sep as the tenant.
const sep = "\x00"

// KeyByIP keys a request by its direct peer, r.RemoteAddr, without the
// port. An IPv4 address (or an IPv4-mapped IPv6 address, which counts as
// IPv4) is its own key; an IPv6 address is grouped by its first ipv6Prefix
// bits, written as a prefix ("2001:db8:1:2::/64"), because one client
// commonly holds a whole /64. ipv6Prefix 0 means 64; outside 0 … 128 every
// request gets an error that names it. An unparsable RemoteAddr is an
// error. For the usual "a.b.c.d:port" the key is a substring of
// RemoteAddr, so it costs no allocation.
func KeyByIP(ipv6Prefix int) KeyFunc {
	bits, berr := prefixBits("KeyByIP", ipv6Prefix)
	return func(r *http.Request) (string, error) {
		if berr != nil {
			return "", berr
		}
		if host, ok := ipv4Host(r.RemoteAddr); ok {
			return host, nil
		}
		a, err := peerAddr(r.RemoteAddr)
		if err != nil {
			return "", err
		}
		return ipKey(a, bits), nil
	}
}

// prefixBits validates an IPv6 prefix length: 0 means 64, 1 … 128 as is.
func prefixBits(fn string, b int) (int, error) {
	switch {
	case b == 0:
		return 64, nil
	case b < 0 || b > 128:
		return 0, errors.New("httplimit: " + fn + " ipv6Prefix = " + strconv.Itoa(b) + ", want 1 … 128 (0 for 64)")
	}
	return b, nil
}

// ipv4Host returns the host of an "a.b.c.d:port" RemoteAddr. netip accepts
// only the canonical dotted form for IPv4 (no leading zeros), so the
// substring is exactly the address's String: the same key, no allocation.
func ipv4Host(remote string) (string, bool) {
	i := strings.LastIndexByte(remote, ':')
	if i < 0 {
		return "", false
	}
	host := remote[:i]
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return "", false
	}
	return host, true
}

// peerAddr parses a RemoteAddr: "ip:port", "[ip6]:port", or a bare IP.
func peerAddr(s string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap(), nil
	}
	return netip.Addr{}, errors.New("httplimit: cannot parse client address " + quote(s))
}

func ipKey(a netip.Addr, bits int) string {
	a = a.Unmap().WithZone("")
	if a.Is4() || bits >= 128 {
		return a.String()
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// quote bounds and quotes untrusted text for an error message.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return "\"" + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s) + "\""
}

// MissingPolicy says what KeyByHeader does when the header is absent or
// empty. Use MissingReject or MissingFallback.
type MissingPolicy struct {
	fallback KeyFunc
}

// MissingReject refuses a request without the header: the key function
// returns an error, which the middleware answers with 400 (or the
// WithKeyErrorHandler handler).
var MissingReject = MissingPolicy{}

// MissingFallback keys a request without the header by k instead (say
// KeyByIP(64)). The fallback keys share the key space with header values,
// so a client could send a header equal to another client's fallback key;
// wrap with Compose or a prefix where that matters.
func MissingFallback(k KeyFunc) MissingPolicy { return MissingPolicy{fallback: k} }

// KeyByHeader keys a request by the value of header name (the first value,
// with surrounding spaces trimmed), such as an API key or tenant id. A
// header that is absent or empty is handled by missing. The value is
// used as sent: authenticate it before trusting it as an identity.
func KeyByHeader(name string, missing MissingPolicy) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := strings.TrimSpace(r.Header.Get(name)); v != "" {
			return v, nil
		}
		if missing.fallback != nil {
			return missing.fallback(r)
		}
		return "", errors.New("httplimit: missing header " + name)
	}
}

// KeyByRoute keys a request by its route and inner's key, joined as
// route + "\x00" + inner key, so that each route has its own window per
// client. routeFunc must return a bounded set of values (a mux pattern, a
// handler name), never the raw path, or every distinct URL would create a
// key. If routeFunc is nil, r.Pattern is used (set by http.ServeMux since
// Go 1.22 for the matched pattern; the middleware must then run inside the
// mux's handler, not around the mux); an empty route is an error.
func KeyByRoute(routeFunc func(*http.Request) string, inner KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var route string
		if routeFunc != nil {
			route = routeFunc(r)
		} else {
			route = r.Pattern
		}
		if route == "" {
			return "", errors.New("httplimit: no route for request (KeyByRoute needs routeFunc or r.Pattern)")
		}
		k, err := inner(r)
		if err != nil {
			return "", err
		}
		return route + sep + k, nil
	}
}

// Compose keys a request by every part's key, joined by "\x00" in order.
// The first error is returned. Put the tenant (or tier) first to use the
// key with Policies.
func Compose(parts ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, p := range parts {
			k, err := p(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(k)
		}
		return b.String(), nil
	}
}
