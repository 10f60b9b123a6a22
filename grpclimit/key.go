package grpclimit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit/internal/adapter"
	"github.com/ringlimit/ringlimit/internal/untrusted"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// A Key maps a call to its limiter key. Build one with KeyByIP,
// KeyByMetadata, KeyByMethod, KeyByXForwardedFor, KeyByForwarded or
// Compose, or wrap a function of your own with KeyFunc. The zero Key is
// invalid.
//
// As in httplimit, a helper given bad arguments does not fail by itself:
// the Key holds the error (see Err), and NewInterceptor returns it, so a
// mistake in the server's configuration stops the server at start-up. An
// error from a Key's function is about the call: the interceptor answers
// it with its gRPC status if it carries one (see KeyFunc), else
// codes.InvalidArgument, and never falls back to a shared key.
//
// Whatever a Key's function returns, an empty key (or one of only white
// space) and a key longer than MaxKeyBytes are key errors
// (codes.InvalidArgument), never passed to the limiter: this holds for
// every function a Key is built from, so a KeyFunc that returns "" inside
// Compose or MissingFallback refuses the call too, rather than sharing one
// bucket among every client it returns "" for.
//
// A Key is a small value; copy it freely. It is safe for concurrent use if
// its function is.
type Key struct {
	fn  func(ctx context.Context, fullMethod string) (string, error)
	err error
}

var errZeroKey = errors.New("grpclimit: the zero Key (build one with KeyByIP, KeyByMetadata, … or KeyFunc)")

// KeyFunc returns a Key that calls f with the call's context (incoming
// metadata, peer) and its full method name ("/pkg.Service/Method"). f
// returns the key, or an error to refuse the call: an error made by the
// status package (status.Error(codes.Unauthenticated, …)) is answered with
// that status, any other with codes.InvalidArgument. f must be safe for
// concurrent use. An empty key (or one of only white space) is refused
// with codes.InvalidArgument.
func KeyFunc(f func(ctx context.Context, fullMethod string) (string, error)) Key {
	if f == nil {
		return Key{err: errors.New("grpclimit: KeyFunc(nil)")}
	}
	return Key{fn: f}
}

// Err returns the configuration error the Key holds, or nil if it is
// usable.
func (k Key) Err() error {
	if k.err == nil && k.fn == nil {
		return errZeroKey
	}
	return k.err
}

// Of returns the key of a call to fullMethod with context ctx, as the
// interceptor computes it: the error of the Key's function, or a key error
// for an empty key or one above MaxKeyBytes. On a Key whose Err is not nil
// it returns that error.
func (k Key) Of(ctx context.Context, fullMethod string) (string, error) {
	if k.fn == nil {
		return "", k.Err()
	}
	return k.of(ctx, fullMethod)
}

// of is Of for a usable Key: every call of a Key's function goes through
// it, so that adapter.CheckKey sees every key a function returns, the
// parts of a composite included.
func (k Key) of(ctx context.Context, fullMethod string) (string, error) {
	key, err := k.fn(ctx, fullMethod)
	if err != nil {
		return "", err
	}
	if err := adapter.CheckKey("grpclimit: ", key); err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	return key, nil
}

func keyError(err error) Key { return Key{err: err} }

// KeyByIP keys a call by its direct peer's IP address (the connection's
// remote address, without the port): the key to use when clients connect
// to the server directly. Its keys are httplimit.KeyByIP's: an IPv4
// address (or an IPv4-mapped IPv6 one) is its own key; an IPv6 address is
// grouped by its first ipv6Prefix bits, written as a prefix
// ("2001:db8:1:2::/64"). ipv6Prefix is 1 … 128, or 0 for 64; anything
// else is a configuration error.
//
// A peer that is not an IP address (a Unix socket listener, an in-memory
// bufconn) is answered codes.Internal: the client cannot fix it, and the
// listener cannot be known at construction. Key such listeners by
// something else.
//
// Behind a reverse proxy the peer is the proxy: use KeyByXForwardedFor or
// KeyByForwarded.
func KeyByIP(ipv6Prefix int) Key {
	bits, err := adapter.PrefixBits("grpclimit: ", "KeyByIP", ipv6Prefix)
	if err != nil {
		return keyError(err)
	}
	return Key{fn: func(ctx context.Context, _ string) (string, error) {
		a, err := peerAddr(ctx)
		if err != nil {
			return "", err
		}
		return adapter.AddrKey(a, bits), nil
	}}
}

// peerAddr returns the call's peer IP, unmapped and without zone. The
// usual *net.TCPAddr costs no allocation.
func peerAddr(ctx context.Context) (netip.Addr, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, status.Error(codes.Internal, "grpclimit: the call has no peer address")
	}
	var a netip.Addr
	if t, ok := p.Addr.(*net.TCPAddr); ok {
		a = t.AddrPort().Addr()
	} else if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
		a = ap.Addr()
	}
	if !a.IsValid() {
		return netip.Addr{}, status.Error(codes.Internal, "grpclimit: the peer address "+untrusted.Quote(p.Addr.String())+" ("+p.Addr.Network()+") is not an IP address; key calls on this listener by something else")
	}
	return a.Unmap().WithZone(""), nil
}

// OnMissing says what KeyByMetadata does when the value is absent or
// empty. Use MissingReject or MissingFallback.
type OnMissing struct {
	fallback    Key
	hasFallback bool
}

// MissingReject refuses a call without the value with
// codes.InvalidArgument. It is the zero OnMissing.
var MissingReject = OnMissing{}

// MissingFallback keys a call without the value by k instead (say
// KeyByIP(64)); a configuration error of k becomes KeyByMetadata's. The
// fallback keys share the key space with metadata values, so a client
// could send a value equal to another client's fallback key; wrap with
// Compose or a prefix where that matters.
func MissingFallback(k Key) OnMissing { return OnMissing{fallback: k, hasFallback: true} }

// MaxProxyHops is the number of hops KeyByXForwardedFor and KeyByForwarded
// read at most, from the right of the chain: 16, httplimit.MaxProxyHops.
// A chain whose rightmost MaxProxyHops hops are all trusted and that goes
// on is refused (codes.InvalidArgument).
const MaxProxyHops = 16

var (
	_ [MaxProxyHops - adapter.MaxProxyHops]struct{}
	_ [adapter.MaxProxyHops - MaxProxyHops]struct{}
)

// MaxKeyBytes is the longest key an Interceptor passes to its limiter, in
// bytes: 256, httplimit.MaxKeyBytes. A longer key, from any Key
// (KeyByMetadata's value, a Compose of parts, a KeyFunc's result), is
// refused with codes.InvalidArgument and a message naming the cap (counted
// Rejected), and never truncated, since a cut key could merge two clients.
// gRPC servers accept header lists of up to 16 MiB by default, and the
// limiter keeps every key it is given (an engine for the key's life, Redis
// for a window): keys of unbounded length are a memory denial of service.
// API keys and tenant ids are far shorter; hash longer credentials in a
// KeyFunc.
const MaxKeyBytes = 256

// The httplimit cap is the same constant; these fail to compile if the
// two ever differ.
var (
	_ [MaxKeyBytes - adapter.MaxKeyBytes]struct{}
	_ [adapter.MaxKeyBytes - MaxKeyBytes]struct{}
)

// KeyByMetadata keys a call by the value of incoming metadata name (the
// first value, with surrounding spaces trimmed), such as an API key or a
// tenant id. A value that is absent or empty is handled by missing; one
// longer than MaxKeyBytes is refused (codes.InvalidArgument, naming the
// metadata and the cap), never cut short and never passed to missing.
// The value is used as
// sent: authenticate it before trusting it as an identity.
//
// name is a metadata key: 1 … 256 characters of a-z, 0-9, '-', '_' and
// '.' (upper case is folded, as gRPC does). Binary keys ("-bin") and
// gRPC's reserved "grpc-" keys are configuration errors.
func KeyByMetadata(name string, missing OnMissing) Key {
	name = strings.ToLower(name)
	if err := validMetadataName(name); err != nil {
		return keyError(errors.New("grpclimit: KeyByMetadata name = " + untrusted.Quote(name) + ": " + err.Error()))
	}
	if missing.hasFallback {
		if err := missing.fallback.Err(); err != nil {
			return keyError(wrapConfig("KeyByMetadata("+name+") MissingFallback", err))
		}
	}
	errMissing := status.Error(codes.InvalidArgument, "grpclimit: missing metadata "+name)
	errLong := status.Error(codes.InvalidArgument, "grpclimit: metadata "+name+" is longer than "+strconv.Itoa(MaxKeyBytes)+" bytes (MaxKeyBytes); refused, never truncated")
	return Key{fn: func(ctx context.Context, method string) (string, error) {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if vs := md[name]; len(vs) > 0 {
				if v := strings.TrimSpace(vs[0]); v != "" {
					if len(v) > MaxKeyBytes {
						return "", errLong
					}
					return v, nil
				}
			}
		}
		if missing.hasFallback {
			return missing.fallback.of(ctx, method)
		}
		return "", errMissing
	}}
}

// validMetadataName checks a lower-cased metadata key.
func validMetadataName(s string) error {
	switch {
	case len(s) == 0 || len(s) > 256:
		return errors.New("want 1 … 256 characters")
	case strings.HasPrefix(s, "grpc-"):
		return errors.New("grpc- keys are reserved by gRPC")
	case strings.HasSuffix(s, "-bin"):
		return errors.New("binary (-bin) metadata is not supported as a key")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return errors.New("want only a-z, 0-9, '-', '_' and '.'")
		}
	}
	return nil
}

// KeyByMethod keys a call by its full method name, "/pkg.Service/Method":
// every method has its own window, shared by all clients. Compose it with
// a client key (Compose(KeyByMethod(), KeyByIP(64))) for a window per
// client and method. The set of keys is the server's registered methods,
// except with grpc.UnknownServiceHandler, where the stream interceptor
// sees whatever method name a client sends.
func KeyByMethod() Key {
	return Key{fn: func(_ context.Context, method string) (string, error) { return method, nil }}
}

// Compose keys a call by every part's key, joined by "\x00" in order, as
// httplimit.Compose does. The first error is returned; a part's empty key
// is one. Compose needs at
// least one part, and a part with an error makes Compose's Key hold it.
func Compose(parts ...Key) Key {
	if len(parts) == 0 {
		return keyError(errors.New("grpclimit: Compose needs at least one part"))
	}
	for i, p := range parts {
		if err := p.Err(); err != nil {
			return keyError(wrapConfig("Compose part "+strconv.Itoa(i), err))
		}
	}
	parts = append([]Key(nil), parts...)
	return Key{fn: func(ctx context.Context, method string) (string, error) {
		return adapter.JoinKeys(len(parts), func(i int) (string, error) { return parts[i].of(ctx, method) })
	}}
}

// KeyByXForwardedFor keys a call by the client address that trusted
// reverse proxies recorded in the x-forwarded-for metadata (Envoy, nginx
// and most HTTP/2 proxies forward it to gRPC backends), with exactly the
// rules of httplimit.KeyByXForwardedFor (both run the same code): the
// metadata is read only when the direct peer is
// in trusted, so a client that connects directly cannot choose its key;
// the hops are walked from the right to the first untrusted address, and
// nothing to its left, which the client may have written, is read; at
// most MaxProxyHops hops are read. It never reads forwarded.
//
// A forged or unparsable chain is codes.InvalidArgument. Configuration
// errors: trusted empty (with no proxy, use KeyByIP), an invalid prefix, a
// prefix of length 0, or ipv6Prefix outside 0 … 128.
func KeyByXForwardedFor(trusted []netip.Prefix, ipv6Prefix int) Key {
	return chainKey("KeyByXForwardedFor", "x-forwarded-for", trusted, ipv6Prefix, false)
}

// KeyByForwarded is KeyByXForwardedFor for the RFC 7239 forwarded
// metadata (the for= parameter of each element), with the rules of
// httplimit.KeyByForwarded. It never reads x-forwarded-for. Use it only
// behind proxies configured to append a forwarded element; behind one
// that only writes x-forwarded-for, forwarded comes from the client.
func KeyByForwarded(trusted []netip.Prefix, ipv6Prefix int) Key {
	return chainKey("KeyByForwarded", "forwarded", trusted, ipv6Prefix, true)
}

func chainKey(fn, name string, trusted []netip.Prefix, ipv6Prefix int, fwd bool) Key {
	c, err := adapter.NewProxyChain("grpclimit: ", fn, name, trusted, ipv6Prefix, fwd)
	if err != nil {
		return keyError(err)
	}
	return Key{fn: func(ctx context.Context, _ string) (string, error) {
		a, err := peerAddr(ctx)
		if err != nil {
			return "", err
		}
		var lines []string
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			lines = md[name]
		}
		k, err := c.Key(a, "", lines)
		if err != nil {
			return "", status.Error(codes.InvalidArgument, err.Error())
		}
		return k, nil
	}}
}
