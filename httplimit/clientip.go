package httplimit

import (
	"errors"
	"net/http"
	"net/netip"

	"github.com/ringlimit/ringlimit/internal/adapter"
	"github.com/ringlimit/ringlimit/internal/untrusted"
)

// The single-value client-IP headers that CDNs and load balancers set,
// for KeyByClientIPHeader. Any other header a proxy sets to one address
// works too.
const (
	HeaderXRealIP        = "X-Real-IP"        // nginx (proxy_set_header X-Real-IP $remote_addr), Traefik, many ingresses
	HeaderTrueClientIP   = "True-Client-IP"   // Akamai, Cloudflare (Enterprise)
	HeaderCFConnectingIP = "CF-Connecting-IP" // Cloudflare
	HeaderFlyClientIP    = "Fly-Client-IP"    // Fly.io
)

// KeyByClientIPHeader keys a request by the client address in header, a
// single-value header that the reverse proxies or the CDN in trusted set
// to the address of their own peer: HeaderXRealIP, HeaderTrueClientIP,
// HeaderCFConnectingIP, HeaderFlyClientIP, or another of that kind. The
// address is grouped like KeyByIP(ipv6Prefix). A deployment trusts one
// header, the one its edge sets: name that one, and no other is read.
//
// The header is read only from a trusted peer, so a client that connects
// directly cannot choose its key with it; the peer (RemoteAddr) is the key
// otherwise, and when a trusted peer sends no such header. trusted holds
// the prefixes of the proxies that connect to this server (for a CDN in
// front, its published address ranges) and of nothing else. The proxy
// must set the header, replacing any value the client sent: nginx's
// proxy_set_header and the CDNs named above do.
//
// Request errors (400): the header from a trusted peer appearing more than
// once, holding a list (a comma), empty, or not an IP address (an
// optional port is allowed: "203.0.113.5:4711", "[2001:db8::1]:443").
// Each of those means that a proxy added to the header rather than set
// it, so its value may be the client's.
//
// Configuration errors (see Key): header not a valid field name, or
// X-Forwarded-For or Forwarded (lists: use KeyByXForwardedFor or
// KeyByForwarded); trusted empty, an invalid prefix, or a prefix of length
// 0; ipv6Prefix outside 0 … 128.
func KeyByClientIPHeader(header string, trusted []netip.Prefix, ipv6Prefix int) Key {
	if !validFieldName(header) {
		return keyError(errors.New("httplimit: KeyByClientIPHeader header = " + untrusted.Quote(header) + ", want a header field name (1 … 256 RFC 9110 token characters)"))
	}
	canon := http.CanonicalHeaderKey(header)
	c, err := adapter.NewClientIPHeader("httplimit: ", "KeyByClientIPHeader", header, trusted, ipv6Prefix)
	if err != nil {
		return keyError(err)
	}
	return Key{fn: func(r *http.Request) (string, error) {
		peer, peerSub, ok := adapter.ParseHop(r.RemoteAddr) // RemoteAddr is short: its substring may be shared
		if !ok {
			return "", errors.New("httplimit: cannot parse client address " + untrusted.Quote(r.RemoteAddr))
		}
		return c.Key(peer, peerSub, r.Header[canon])
	}}
}
