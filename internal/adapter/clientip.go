package adapter

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ringlimit/ringlimit/internal/untrusted"
)

// ClientIPHeader finds a request's client in a single-value header that a
// trusted proxy sets to its own peer's address (X-Real-IP,
// True-Client-IP, CF-Connecting-IP, Fly-Client-IP …), with the rules that
// httplimit.KeyByClientIPHeader documents. The zero ClientIPHeader is not
// usable. It is a small value, safe for concurrent use.
type ClientIPHeader struct {
	prefix   string // "httplimit: ", for errors
	header   string // the header's name, for errors
	trust    trustList
	bits     int
	errEmpty error
	errMany  error
	errList  error
}

// NewClientIPHeader returns the reading of header from the trusted
// proxies, keying the client like AddrKey(a, ipv6Prefix), or the
// configuration error, which names fn after prefix. header must not be
// X-Forwarded-For or Forwarded: those are lists (NewProxyChain).
func NewClientIPHeader(prefix, fn, header string, trusted []netip.Prefix, ipv6Prefix int) (ClientIPHeader, error) {
	switch strings.ToLower(header) {
	case "x-forwarded-for", "forwarded":
		return ClientIPHeader{}, fmt.Errorf("%s%s(%q): %s is a list of hops, not one address; use KeyByXForwardedFor or KeyByForwarded, which walk it from the right", prefix, fn, header, header)
	}
	bits, err := PrefixBits(prefix, fn, ipv6Prefix)
	if err != nil {
		return ClientIPHeader{}, err
	}
	tr, err := newTrustList(prefix, fn, trusted)
	if err != nil {
		return ClientIPHeader{}, err
	}
	return ClientIPHeader{
		prefix:   prefix,
		header:   header,
		trust:    tr,
		bits:     bits,
		errEmpty: errors.New(prefix + header + " from a trusted proxy is empty, want one IP address"),
		errMany:  errors.New(prefix + header + " appears more than once, want one IP address: does a proxy add the header instead of setting it?"),
		errList:  errors.New(prefix + header + " holds a list, want one IP address: does a proxy append to the header instead of setting it?"),
	}, nil
}

// Key returns the key of a request that arrived from peer (the direct
// connection's address, unmapped and without zone; peerSub as for
// ProxyChain.Key) with lines, the header's field lines: peer's own key
// unless peer is trusted, or if the header is absent; else the address
// the header holds. An error is about the request (the header repeated,
// a list, empty, or not an address), never a shared key. The returned
// key never shares memory with a line longer than 64 bytes.
func (c *ClientIPHeader) Key(peer netip.Addr, peerSub string, lines []string) (string, error) {
	if !c.trust.contains(peer) || len(lines) == 0 {
		return hopKey(peer, peerSub, c.bits), nil
	}
	if len(lines) > 1 {
		return "", c.errMany
	}
	v := strings.Trim(lines[0], " \t")
	switch {
	case v == "":
		return "", c.errEmpty
	case strings.IndexByte(v, ',') >= 0:
		return "", c.errList
	}
	a, sub, ok := ParseHop(v)
	if !ok {
		return "", fmt.Errorf("%s%s: unparsable address %s", c.prefix, c.header, untrusted.Quote(v))
	}
	if sub != "" && len(lines[0]) > maxSharedLine {
		sub = strings.Clone(sub) // as in ProxyChain.Key: a key must not pin a padded line
	}
	return hopKey(a, sub, c.bits), nil
}
