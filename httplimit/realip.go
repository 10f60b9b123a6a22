package httplimit

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
)

// KeyByRealIP keys a request by the client address behind trusted reverse
// proxies, grouped like KeyByIP(ipv6Prefix).
//
// The forwarding headers are read only when the direct peer (RemoteAddr)
// is inside one of the trusted prefixes; otherwise the peer itself is the
// key, whatever the headers say, so a client cannot spoof its key. With a
// trusted peer, the chain of addresses from the RFC 7239 Forwarded header
// (its for= parameters) — or, if there is no Forwarded header, from
// X-Forwarded-For — is walked from the right, skipping trusted proxies, and
// the first untrusted address is the key. If every address is trusted, the
// leftmost one is used; if the headers are absent, the peer is. An address
// in the chain that cannot be parsed ("unknown", an obfuscated identifier,
// garbage) before an untrusted one is found is an error (400): it was
// written by a trusted proxy, and no safe key can be derived from it.
//
// With no trusted prefixes, KeyByRealIP is KeyByIP.
func KeyByRealIP(trusted []netip.Prefix, ipv6Prefix int) KeyFunc {
	bits, berr := prefixBits("KeyByRealIP", ipv6Prefix)
	if berr != nil {
		return func(*http.Request) (string, error) { return "", berr }
	}
	tr := make([]netip.Prefix, 0, len(trusted))
	for _, p := range trusted {
		if p.IsValid() {
			tr = append(tr, p.Masked())
		}
	}
	isTrusted := func(a netip.Addr) bool {
		for _, p := range tr {
			pa := a
			if p.Addr().Is6() && a.Is4() {
				pa = netip.AddrFrom16(a.As16()) // a mapped prefix such as ::ffff:10.0.0.0/104
			}
			if p.Contains(pa) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		peer, err := peerAddr(r.RemoteAddr)
		if err != nil {
			return "", err
		}
		if !isTrusted(peer) {
			return ipKey(peer, bits), nil
		}
		chain := forwardedChain(r.Header)
		client := peer
		for i := len(chain) - 1; i >= 0; i-- {
			a, ok := parseHop(chain[i])
			if !ok {
				return "", errors.New("httplimit: unparsable forwarded address " + quote(chain[i]))
			}
			client = a
			if !isTrusted(a) {
				break
			}
		}
		return ipKey(client, bits), nil
	}
}

// forwardedChain returns the hop addresses, leftmost (the original client)
// first: the for= values of every Forwarded header, or else the entries of
// every X-Forwarded-For header.
func forwardedChain(h http.Header) []string {
	var out []string
	if fw := h.Values("Forwarded"); len(fw) > 0 {
		for _, line := range fw {
			for elem := range strings.SplitSeq(line, ",") {
				for pair := range strings.SplitSeq(elem, ";") {
					k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
					if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
						out = append(out, strings.Trim(strings.TrimSpace(v), `"`))
					}
				}
			}
		}
		return out
	}
	for _, line := range h.Values("X-Forwarded-For") {
		for v := range strings.SplitSeq(line, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// parseHop parses one hop: "1.2.3.4", "1.2.3.4:80", "2001:db8::1",
// "[2001:db8::1]" or "[2001:db8::1]:80".
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}
