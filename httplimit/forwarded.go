package httplimit

import (
	"errors"
	"net/http"
	"net/netip"

	"github.com/ringlimit/ringlimit/internal/adapter"
	"github.com/ringlimit/ringlimit/internal/untrusted"
)

// MaxProxyHops is the number of hops KeyByXForwardedFor and KeyByForwarded
// read at most, from the right of the chain. The client must be among
// them: a chain whose rightmost MaxProxyHops hops are all trusted and that
// goes on is refused (400). Empty list members count as hops here. Real
// deployments have a handful of proxies; the cap bounds the work a forged
// chain can cause.
const MaxProxyHops = 16

// grpclimit reads the same hops; these fail to compile if the two caps
// ever differ.
var (
	_ [MaxProxyHops - adapter.MaxProxyHops]struct{}
	_ [adapter.MaxProxyHops - MaxProxyHops]struct{}
)

// KeyByXForwardedFor keys a request by the client address that trusted
// reverse proxies recorded in X-Forwarded-For, grouped like
// KeyByIP(ipv6Prefix). It never reads Forwarded.
//
// It fits proxies that append the address of their own peer to
// X-Forwarded-For (or add a new X-Forwarded-For line with it): nginx with
// "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for", HAProxy's
// "option forwardfor", AWS ALB (the default append mode), Envoy with
// use_remote_address. trusted holds the prefixes of those proxies and of
// nothing else (a client inside a trusted prefix is taken for a proxy, and
// its own forged hops are read), and every proxy on the path must append:
// a trusted proxy that passes the header on unchanged lets its client
// write the hop it vouches for.
//
// The peer (RemoteAddr) is the key unless it is trusted; the header is
// read only from a trusted peer, so a client that connects directly cannot
// choose its key. From a trusted peer, the hops are walked from the right
// (lines from the last, entries right to left), skipping trusted ones, and
// the first untrusted address is the key. Nothing to its left, which the
// client may have written, is read: the cost does not depend on it, and
// no slice is built. If every hop is trusted the leftmost is the key; if
// the header is absent the peer is. Request errors (400): an entry that is
// not an IP address (with an optional port) before the client is found,
// and a chain whose MaxProxyHops rightmost hops are all trusted and that
// goes on.
//
// Configuration errors (see Key): trusted empty (with no proxy, use
// KeyByIP), an invalid prefix, a prefix of length 0 (it would trust
// everyone, so any client could choose its key), or ipv6Prefix outside
// 0 … 128.
func KeyByXForwardedFor(trusted []netip.Prefix, ipv6Prefix int) Key {
	return chainKey("KeyByXForwardedFor", "X-Forwarded-For", trusted, ipv6Prefix, false)
}

// KeyByForwarded is KeyByXForwardedFor for the RFC 7239 Forwarded header:
// the for= parameter of each element is the hop. It never reads
// X-Forwarded-For.
//
// It fits proxies configured to append a Forwarded element with for= for
// their peer: HAProxy's "option forwarded", or nginx with a
// proxy_set_header Forwarded that appends "for=$remote_addr" to the
// incoming value. Behind a proxy that only writes X-Forwarded-For, use
// KeyByXForwardedFor: there the Forwarded header comes from the client.
//
// Elements are split at commas outside quoted strings, walking each line
// from its end, so quotes in the client's part to the left of the client's
// element are never read. The for= value may be quoted and carry a port
// ("[2001:db8::1]:4711"), numeric or obfuscated (RFC 7239 section 6.3:
// "203.0.113.5:_abc", "[2001:db8::1]:_port"); either way the address is
// the key. Besides KeyByXForwardedFor's request errors, an
// element without for= (or with two), an unterminated quoted string in the
// part read, or a for= whose node is not an address ("unknown", an
// obfuscated "_name") is a 400, since no safe key can be derived from it.
func KeyByForwarded(trusted []netip.Prefix, ipv6Prefix int) Key {
	return chainKey("KeyByForwarded", "Forwarded", trusted, ipv6Prefix, true)
}

func chainKey(fn, header string, trusted []netip.Prefix, ipv6Prefix int, fwd bool) Key {
	c, err := adapter.NewProxyChain("httplimit: ", fn, header, trusted, ipv6Prefix, fwd)
	if err != nil {
		return keyError(err)
	}
	canon := http.CanonicalHeaderKey(header)
	return Key{fn: func(r *http.Request) (string, error) {
		peer, peerSub, ok := adapter.ParseHop(r.RemoteAddr) // RemoteAddr is short: its substring may be shared
		if !ok {
			return "", errors.New("httplimit: cannot parse client address " + untrusted.Quote(r.RemoteAddr))
		}
		return c.Key(peer, peerSub, r.Header[canon])
	}}
}
