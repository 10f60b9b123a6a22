package adapter

import (
	"net/netip"
	"strings"
	"testing"
)

var trusted = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}

func TestProxyChainKeys(t *testing.T) {
	proxy := netip.MustParseAddr("10.0.0.1")
	client := netip.MustParseAddr("203.0.113.9")
	long := "198.51.100.7, " + strings.Repeat(" ", 80) + "10.1.1.1"
	for _, c := range []struct {
		name  string
		fwd   bool
		peer  netip.Addr
		sub   string
		lines []string
		want  string
	}{
		{"untrusted peer: its own key", false, client, "", []string{"1.2.3.4"}, "203.0.113.9"},
		{"untrusted peer, its text given", false, client, "203.0.113.9", nil, "203.0.113.9"},
		{"trusted peer, no header", false, proxy, "", nil, "10.0.0.1"},
		{"trusted peer, only empty members", false, proxy, "", []string{" , "}, "10.0.0.1"},
		{"first untrusted from the right", false, proxy, "", []string{"6.6.6.6, 198.51.100.7, 10.9.9.9"}, "198.51.100.7"},
		{"across lines", false, proxy, "", []string{"6.6.6.6, 198.51.100.7", "10.9.9.9,10.8.8.8"}, "198.51.100.7"},
		{"every hop trusted: the leftmost", false, proxy, "", []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},
		{"IPv4 with a port", false, proxy, "", []string{"198.51.100.7:4711"}, "198.51.100.7"},
		{"IPv6 keyed by its /64", false, proxy, "", []string{"2001:db8:1:2:3:4:5:6"}, "2001:db8:1:2::/64"},
		{"bracketed IPv6 with a port", false, proxy, "", []string{"[2001:db8:1:2::9]:443"}, "2001:db8:1:2::/64"},
		{"bracketed IPv6", false, proxy, "", []string{"[2001:db8:1:2::9]"}, "2001:db8:1:2::/64"},
		{"trusted IPv6 hop", false, proxy, "", []string{"198.51.100.7, 2001:db8:ffff::1"}, "198.51.100.7"},
		{"IPv4-mapped IPv6 is IPv4", false, proxy, "", []string{"::ffff:198.51.100.7"}, "198.51.100.7"},
		{"a hop from a long line is copied", false, proxy, "", []string{long}, "198.51.100.7"},
		{"Forwarded for=", true, proxy, "", []string{`for=198.51.100.7;proto=https, for=10.2.2.2`}, "198.51.100.7"},
		{"Forwarded quoted IPv6 with a port", true, proxy, "", []string{`For="[2001:db8:1:2::9]:8080"`}, "2001:db8:1:2::/64"},
		{"Forwarded comma inside quotes", true, proxy, "", []string{`for=198.51.100.7;x="a,b", for=10.2.2.2`}, "198.51.100.7"},
		{"Forwarded escaped quote inside quotes", true, proxy, "", []string{`for=198.51.100.7;x="a\",b"`}, "198.51.100.7"},
		{"Forwarded quoted-pair in a value", true, proxy, "", []string{`by="\;";for=198.51.100.7`}, "198.51.100.7"},
		{"Forwarded obfuscated port", true, proxy, "", []string{`for="198.51.100.7:_abc-1.x"`}, "198.51.100.7"},
		{"Forwarded obfuscated port on IPv6", true, proxy, "", []string{`for="[2001:db8:1:2::9]:_p"`}, "2001:db8:1:2::/64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pc, err := NewProxyChain("httplimit: ", "KeyByXForwardedFor", "X-Forwarded-For", trusted, 0, c.fwd)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pc.Key(c.peer, c.sub, c.lines)
			if err != nil || got != c.want {
				t.Errorf("Key(%v, %q) = %q, %v; want %q", c.peer, c.lines, got, err, c.want)
			}
		})
	}
}

func TestProxyChainRefusals(t *testing.T) {
	proxy := netip.MustParseAddr("10.0.0.1")
	var hops []string
	for range MaxProxyHops + 1 {
		hops = append(hops, "10.1.1.1")
	}
	for _, c := range []struct {
		name  string
		fwd   bool
		lines []string
		want  string
	}{
		{"too many trusted hops", false, []string{strings.Join(hops, ",")}, "httplimit: Forwarded has more than 16 hops from trusted proxies"},
		{"unparsable address", false, []string{"not-an-ip"}, `httplimit: Forwarded: unparsable address "not-an-ip"`},
		{"IPv6 with a bare port", false, []string{"2001:db8::1:80:"}, "unparsable address"},
		{"a v6 address with one colon", false, []string{"a:b"}, "unparsable address"},
		{"an unterminated quote", true, []string{`for="198.51.100.7`}, "httplimit: Forwarded: unterminated quoted string"},
		{"no for=", true, []string{`proto=https`}, `no for= parameter in element "proto=https"`},
		{"two for=", true, []string{`for=1.1.1.1;for=2.2.2.2`}, "two for= parameters"},
		{"an obfuscated node", true, []string{`for=_hidden`}, `unparsable address "_hidden"`},
		{"a bare underscore port", true, []string{`for="198.51.100.7:_"`}, "unparsable address"},
		{"a bad obfuscated port", true, []string{`for="198.51.100.7:_a!b"`}, "unparsable address"},
		{"an obfuscated port on bare IPv6", true, []string{`for="2001:db8::1:_p"`}, "unparsable address"},
		{"a quoted-pair in an address", true, []string{`for="198.51.100.\7"`}, "unparsable address"},
		{"a bracketed bad IPv6", false, []string{"[zz::1]"}, "unparsable address"},
		{"a bracketed bad port", false, []string{"[2001:db8::1]:x"}, "unparsable address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pc, err := NewProxyChain("httplimit: ", "KeyByForwarded", "Forwarded", trusted, 0, c.fwd)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := pc.Key(proxy, "", c.lines); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Key(%q) = %q, %v; want an error with %q", c.lines, got, err, c.want)
			}
		})
	}
}

func TestNewProxyChainErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		trusted []netip.Prefix
		bits    int
		want    string
	}{
		{"no prefixes", nil, 0, "httplimit: KeyByXForwardedFor trusted is empty, want the prefixes of your reverse proxies"},
		{"an invalid prefix", []netip.Prefix{{}}, 0, "trusted[0] = invalid Prefix is not a valid prefix"},
		{"trusts everything", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::/0")}, 0, "trusted[1] = ::/0 trusts every address"},
		{"mapped ::/96 trusts all IPv4", []netip.Prefix{netip.MustParsePrefix("::ffff:0.0.0.0/96")}, 0, "trusts every address"},
		{"ipv6Prefix below 0", trusted, -1, "httplimit: KeyByXForwardedFor ipv6Prefix = -1, want 1 … 128 (0 for 64)"},
		{"ipv6Prefix above 128", trusted, 129, "ipv6Prefix = 129"},
	} {
		if _, err := NewProxyChain("httplimit: ", "KeyByXForwardedFor", "X-Forwarded-For", c.trusted, c.bits, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// A mapped IPv6 prefix trusts the IPv4 addresses it maps.
	pc, err := NewProxyChain("p: ", "F", "X-Forwarded-For", []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pc.Key(netip.MustParseAddr("10.0.0.1"), "", []string{"198.51.100.7"}); err != nil || got != "198.51.100.7" {
		t.Errorf("mapped trust: %q, %v", got, err)
	}
}

func TestAddrKeyAndPrefixBits(t *testing.T) {
	for _, c := range []struct {
		a    string
		bits int
		want string
	}{
		{"198.51.100.7", 64, "198.51.100.7"},
		{"::ffff:198.51.100.7", 64, "198.51.100.7"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
		{"fe80::1%eth0", 128, "fe80::1"},
	} {
		if got := AddrKey(netip.MustParseAddr(c.a), c.bits); got != c.want {
			t.Errorf("AddrKey(%s, %d) = %q, want %q", c.a, c.bits, got, c.want)
		}
	}
	if got := HopKey(netip.MustParseAddr("198.51.100.7"), "198.51.100.7", 64); got != "198.51.100.7" {
		t.Errorf("HopKey with its text = %q", got)
	}
	if got := HopKey(netip.MustParseAddr("2001:db8::1"), "", 32); got != "2001:db8::/32" {
		t.Errorf("HopKey = %q", got)
	}
	for in, want := range map[int]int{0: 64, 1: 1, 128: 128} {
		if got, err := PrefixBits("p: ", "F", in); err != nil || got != want {
			t.Errorf("PrefixBits(%d) = %d, %v; want %d", in, got, err, want)
		}
	}
}
