package adapter

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit/internal/untrusted"
)

// MaxProxyHops is the number of hops a ProxyChain reads at most, from the
// right of the chain (httplimit.MaxProxyHops and grpclimit.MaxProxyHops).
const MaxProxyHops = 16

// ProxyChain finds a request's client in a forwarding header (the lines of
// X-Forwarded-For, or of Forwarded), with the rules that
// httplimit.KeyByXForwardedFor and httplimit.KeyByForwarded document and
// grpclimit's keys of the same names share. The zero ProxyChain is not
// usable. It is a small value, safe for concurrent use.
type ProxyChain struct {
	prefix  string // "httplimit: ", for errors
	header  string // the header's name, for errors
	fwd     bool   // Forwarded (for= of RFC 7239 elements), else X-Forwarded-For
	trust   trustList
	bits    int
	errLong error
}

// NewProxyChain returns the walk of header (Forwarded when fwd, else
// X-Forwarded-For) from the trusted proxies, keying the client like
// AddrKey(a, ipv6Prefix), or the configuration error, which names fn
// after prefix.
func NewProxyChain(prefix, fn, header string, trusted []netip.Prefix, ipv6Prefix int, fwd bool) (ProxyChain, error) {
	bits, err := PrefixBits(prefix, fn, ipv6Prefix)
	if err != nil {
		return ProxyChain{}, err
	}
	tr, err := newTrustList(prefix, fn, trusted)
	if err != nil {
		return ProxyChain{}, err
	}
	return ProxyChain{
		prefix:  prefix,
		header:  header,
		fwd:     fwd,
		trust:   tr,
		bits:    bits,
		errLong: fmt.Errorf("%s%s has more than %d hops from trusted proxies", prefix, header, MaxProxyHops),
	}, nil
}

// PrefixBits validates an IPv6 prefix length: 0 means 64, 1 … 128 as is.
func PrefixBits(prefix, fn string, b int) (int, error) {
	switch {
	case b == 0:
		return 64, nil
	case b < 0 || b > 128:
		return 0, errors.New(prefix + fn + " ipv6Prefix = " + strconv.Itoa(b) + ", want 1 … 128 (0 for 64)")
	}
	return b, nil
}

// Key returns the key of a request that arrived from peer (the direct
// connection's address, unmapped and without zone; peerSub is its IPv4
// text when the caller has it without allocating, else "") with lines,
// the field lines of the forwarding header in the order received: peer's
// own key unless peer is trusted; else the first untrusted hop from the
// right. Nothing to its left, which the client may have written, is read.
// An error is about the request (a forged or unparsable chain, too many
// trusted hops), never a shared key. The returned key never shares memory
// with a line longer than 64 bytes.
func (c *ProxyChain) Key(peer netip.Addr, peerSub string, lines []string) (string, error) {
	if !c.trust.contains(peer) {
		return hopKey(peer, peerSub, c.bits), nil
	}
	header := c.header
	it := newHopIter(lines, c.fwd)
	var last netip.Addr         // the last hop read: the first untrusted, or the leftmost
	var lastSub, lastSrc string // its IPv4 text, and the line it is in
	for n := 0; ; n++ {
		m, more, err := it.next()
		if err != nil {
			return "", fmt.Errorf("%s%s: %w", c.prefix, header, err)
		}
		if !more {
			break
		}
		if n == MaxProxyHops {
			return "", c.errLong
		}
		if m == "" {
			continue // an empty member: allowed by the list syntax, counted all the same
		}
		v, hop := m, m
		if c.fwd {
			if v, err = forValue(m); err != nil {
				return "", fmt.Errorf("%s%s: %w in element %s", c.prefix, header, err, untrusted.Quote(m))
			}
			hop = dropObfuscatedPort(v)
		}
		a, sub, ok := ParseHop(hop)
		if !ok {
			return "", fmt.Errorf("%s%s: unparsable address %s", c.prefix, header, untrusted.Quote(v))
		}
		last, lastSub, lastSrc = a, sub, it.src
		if !c.trust.contains(a) {
			break
		}
	}
	if !last.IsValid() { // no hops: the trusted peer is the client
		return hopKey(peer, peerSub, c.bits), nil
	}
	if lastSub != "" && len(lastSrc) > maxSharedLine {
		// The engine keeps the key string for the key's life: a
		// substring would keep the whole line, which the client can
		// pad, alive with it.
		lastSub = strings.Clone(lastSub)
	}
	return hopKey(last, lastSub, c.bits), nil
}

// AddrKey is the key of address a: its text, or for IPv6 the text of its
// first bits as a prefix (an IPv4-mapped address counts as IPv4; a zone
// is dropped). One allocation: the text is built on the stack.
func AddrKey(a netip.Addr, bits int) string {
	a = a.Unmap().WithZone("")
	var buf [64]byte // longest: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", 43 bytes
	if a.Is4() || bits >= 128 {
		return string(a.AppendTo(buf[:0]))
	}
	p, _ := a.Prefix(bits)
	return string(p.AppendTo(buf[:0]))
}

// HopKey is a's key: sub when it is a's canonical IPv4 text (a substring,
// no allocation), else AddrKey.
func HopKey(a netip.Addr, sub string, bits int) string { return hopKey(a, sub, bits) }

// trustList is a validated set of trusted prefixes: IPv4-mapped IPv6
// prefixes are stored as IPv4 (addresses are unmapped before lookup), and
// each is masked.
type trustList []netip.Prefix

func newTrustList(prefix, fn string, trusted []netip.Prefix) (trustList, error) {
	if len(trusted) == 0 {
		return nil, fmt.Errorf("%s%s trusted is empty, want the prefixes of your reverse proxies (with no proxy, use KeyByIP)", prefix, fn)
	}
	t := make(trustList, 0, len(trusted))
	for i, p := range trusted {
		if !p.IsValid() {
			return nil, fmt.Errorf("%s%s trusted[%d] = %v is not a valid prefix", prefix, fn, i, p)
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("%s%s trusted[%d] = %v trusts every address, so any client could choose its key; want your proxies' prefixes (length ≥ 1)", prefix, fn, i, trusted[i])
		}
		t = append(t, p.Masked())
	}
	return t, nil
}

func (t trustList) contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func hopKey(a netip.Addr, sub string, bits int) string {
	if sub != "" {
		return sub
	}
	return AddrKey(a, bits)
}

// maxSharedLine is the longest header line a hop key may be a substring
// of; a key from a longer line is copied (one small allocation), so that a
// key never pins more than this many bytes of a request.
const maxSharedLine = 64

// ParseHop parses one hop: "1.2.3.4", "1.2.3.4:80", "2001:db8::1",
// "[2001:db8::1]" or "[2001:db8::1]:80". The address is unmapped and has
// no zone (netip.Prefix.Contains is false for a zoned address). sub is
// the substring holding a plain IPv4 address, which netip accepts only in
// canonical form, so it equals the address's String; it is "" otherwise.
// The form is told by its shape before parsing, because a failed netip
// parse allocates its error: a valid hop costs no allocation.
func ParseHop(s string) (a netip.Addr, sub string, ok bool) {
	switch {
	case len(s) > 2 && s[0] == '[':
		if s[len(s)-1] == ']' { // "[v6]"
			a, err := netip.ParseAddr(s[1 : len(s)-1])
			return a.Unmap().WithZone(""), "", err == nil
		}
		ap, err := netip.ParseAddrPort(s) // "[v6]:port"
		return ap.Addr().Unmap().WithZone(""), "", err == nil
	case strings.Count(s, ":") == 1: // "v4:port"
		ap, err := netip.ParseAddrPort(s)
		if err != nil || !ap.Addr().Is4() {
			return netip.Addr{}, "", false
		}
		return ap.Addr(), s[:strings.IndexByte(s, ':')], true
	default: // "v4" or "v6"
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, "", false
		}
		if a.Is4() {
			return a, s, true
		}
		return a.Unmap().WithZone(""), "", true
	}
}

// hopIter walks the members of a list-valued header from the right: the
// lines from the last, and each line from its end. It holds offsets, not a
// slice of members, so a walk that stops early costs nothing for the part
// to the left.
type hopIter struct {
	src   string // the line the last member came from
	lines []string
	line  int  // the line being walked; −1 when done
	end   int  // lines[line][:end] is still to walk
	fwd   bool // Forwarded: commas inside quoted strings do not separate
}

func newHopIter(lines []string, fwd bool) hopIter {
	it := hopIter{lines: lines, line: len(lines) - 1, fwd: fwd}
	if it.line >= 0 {
		it.end = len(lines[it.line])
	}
	return it
}

var errUnterminated = errors.New("unterminated quoted string")

// next returns the next member to the left, trimmed of optional
// whitespace. It may be empty (", ,"): RFC 9110's list rule makes the
// caller skip those, and they count toward its cap all the same (an empty
// field line is one too), so a run of them costs a bounded walk.
func (it *hopIter) next() (member string, more bool, err error) {
	if it.line >= 0 {
		it.src = it.lines[it.line]
		s := it.src[:it.end]
		var i int
		if it.fwd {
			if i, err = lastSeparator(s); err != nil {
				return "", false, err
			}
		} else {
			i = strings.LastIndexByte(s, ',')
		}
		m := strings.Trim(s[i+1:], " \t")
		if i >= 0 {
			it.end = i
		} else if it.line--; it.line >= 0 {
			it.end = len(it.lines[it.line])
		}
		return m, true, nil
	}
	return "", false, nil
}

// lastSeparator returns the index of the last comma of s outside quoted
// strings, or −1. Walking backwards, a quote opens a quoted string, and a
// quote preceded by an odd number of backslashes inside one is escaped
// (quoted-pair), not its end.
func lastSeparator(s string) (int, error) {
	inQuote := false
	for j := len(s) - 1; j >= 0; j-- {
		switch s[j] {
		case '"':
			if !inQuote {
				inQuote = true
			} else if !escapedAt(s, j) {
				inQuote = false
			}
		case ',':
			if !inQuote {
				return j, nil
			}
		}
	}
	if inQuote {
		return 0, errUnterminated
	}
	return -1, nil
}

// escapedAt reports whether s[j] is preceded by an odd number of
// backslashes.
func escapedAt(s string, j int) bool {
	n := 0
	for j--; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// forValue returns the for= value of one Forwarded element, without its
// quotes. An element is pairs separated by ';' outside quoted strings.
func forValue(elem string) (string, error) {
	var val string
	found := false
	for rest := elem; ; {
		pair, tail, more := cutPair(rest)
		if k, v, ok := strings.Cut(pair, "="); ok && strings.EqualFold(strings.Trim(k, " \t"), "for") {
			if found {
				return "", errors.New("two for= parameters")
			}
			found, val = true, strings.Trim(v, " \t")
		}
		if !more {
			break
		}
		rest = tail
	}
	if !found {
		return "", errors.New("no for= parameter")
	}
	if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
		// An address needs no quoted-pair; one left in is not an address,
		// and ParseHop refuses it.
		val = val[1 : len(val)-1]
	}
	return val, nil
}

// dropObfuscatedPort returns v without an obfuscated port (RFC 7239
// section 6.3: node-port = port / obfport, obfport = "_" 1*(ALPHA / DIGIT
// / "." / "_" / "-")) after an IPv4 address or a bracketed IPv6 one, so
// that ParseHop keys the address as it does with a numeric port. Anything
// else is returned as is, for ParseHop to judge: an obfuscated node
// ("_hidden") stays unparsable.
func dropObfuscatedPort(v string) string {
	i := strings.LastIndexByte(v, ':')
	if i < 0 || i+2 > len(v) || v[i+1] != '_' {
		return v
	}
	for _, c := range []byte(v[i+2:]) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return v
		}
	}
	if i+2 == len(v) { // "_" alone: obfport needs one character after it
		return v
	}
	node := v[:i]
	if node != "" && (node[0] == '[' && node[len(node)-1] == ']' || strings.IndexByte(node, ':') < 0) {
		return node
	}
	return v
}

// cutPair cuts s at its first ';' outside quoted strings.
func cutPair(s string) (pair, rest string, more bool) {
	inQuote := false
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case '\\':
			if inQuote {
				j++ // quoted-pair: skip the escaped byte
			}
		case '"':
			inQuote = !inQuote
		case ';':
			if !inQuote {
				return s[:j], s[j+1:], true
			}
		}
	}
	return s, "", false
}
