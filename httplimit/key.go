package httplimit

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit/internal/adapter"
	"github.com/ringlimit/ringlimit/internal/untrusted"
)

// A Key maps a request to its limiter key. Build one with KeyByIP,
// KeyByXForwardedFor, KeyByForwarded, KeyByClientIPHeader, KeyByHeader,
// KeyByRoute or Compose, or wrap a function of your own with KeyFunc. The zero Key is invalid.
//
// A helper given bad arguments does not fail by itself: the Key it returns
// holds the error (see Err), Compose, KeyByRoute and MissingFallback pass
// it on, and NewMiddleware returns it (New panics with it). So a mistake in
// the server's configuration stops the server at start-up and is never
// answered to clients. An error of Of, by contrast, is about the request
// (a missing header, a forged chain): the middleware answers it with 400
// (see WithKeyErrorHandler), never with a shared key.
//
// Whatever a Key's function returns, an empty key (or one of only white
// space) and a key longer than MaxKeyBytes are key errors (400), never
// passed to the limiter: this holds for every function a Key is built
// from, so a KeyFunc that returns "" inside Compose, KeyByRoute or
// MissingFallback refuses the request too, rather than sharing one bucket
// among every client it returns "" for.
//
// A Key is a small value; copy it freely. It is safe for concurrent use if
// its function is.
type Key struct {
	fn  func(*http.Request) (string, error)
	err error
}

var errZeroKey = errors.New("httplimit: the zero Key (build one with KeyByIP, KeyByHeader, … or KeyFunc)")

// KeyFunc returns a Key that calls f. f returns the request's key, or an
// error to refuse the request (400 by default); an empty key (or one of
// only white space) refuses it too. f must be safe for concurrent use.
func KeyFunc(f func(r *http.Request) (string, error)) Key {
	if f == nil {
		return Key{err: errors.New("httplimit: KeyFunc(nil)")}
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

// Of returns r's key, as the middleware computes it: the error of the
// Key's function, or a key error for an empty key or one above
// MaxKeyBytes. On a Key whose Err is not nil it returns that error.
func (k Key) Of(r *http.Request) (string, error) {
	if k.fn == nil {
		return "", k.Err()
	}
	return k.of(r)
}

// of is Of for a usable Key: every call of a Key's function goes through
// it, so that adapter.CheckKey sees every key a function returns, the
// parts of a composite included.
func (k Key) of(r *http.Request) (string, error) {
	key, err := k.fn(r)
	if err != nil {
		return "", err
	}
	if err := adapter.CheckKey("httplimit: ", key); err != nil {
		return "", err
	}
	return key, nil
}

// keyError returns a Key holding err.
func keyError(err error) Key { return Key{err: err} }

// KeyByIP keys a request by its direct peer, r.RemoteAddr, without the
// port: the key to use when clients connect to the server directly. An
// IPv4 address (or an IPv4-mapped IPv6 address, which counts as IPv4) is its
// own key; an IPv6 address is grouped by its first ipv6Prefix bits, written
// as a prefix ("2001:db8:1:2::/64"), because one client commonly holds a
// whole /64. ipv6Prefix is 1 … 128, or 0 for 64; anything else is a
// configuration error. A RemoteAddr that is not an IP address (a Unix
// socket listener) is a request error. For the usual "a.b.c.d:port" the key
// is a substring of RemoteAddr, so it costs no allocation.
//
// Behind a reverse proxy RemoteAddr is the proxy: use KeyByXForwardedFor,
// KeyByForwarded or KeyByClientIPHeader.
func KeyByIP(ipv6Prefix int) Key {
	bits, err := adapter.PrefixBits("httplimit: ", "KeyByIP", ipv6Prefix)
	if err != nil {
		return keyError(err)
	}
	return Key{fn: func(r *http.Request) (string, error) {
		a, sub, ok := adapter.ParseHop(r.RemoteAddr)
		if !ok {
			return "", errors.New("httplimit: cannot parse client address " + untrusted.Quote(r.RemoteAddr))
		}
		return adapter.HopKey(a, sub, bits), nil
	}}
}

// OnMissing says what KeyByHeader does when the header is absent or
// empty. Use MissingReject or MissingFallback.
type OnMissing struct {
	fallback    Key
	hasFallback bool
}

// MissingReject refuses a request without the header: the key function
// returns an error, which the middleware answers with 400 (or the
// WithKeyErrorHandler handler). It is the zero OnMissing.
var MissingReject = OnMissing{}

// MissingFallback keys a request without the header by k instead (say
// KeyByIP(64)); a configuration error of k becomes KeyByHeader's. The
// fallback keys share the key space with header values, so a client could
// send a header equal to another client's fallback key; wrap with Compose
// or a prefix where that matters.
func MissingFallback(k Key) OnMissing { return OnMissing{fallback: k, hasFallback: true} }

// KeyByHeader keys a request by the value of header name (the first value,
// with surrounding spaces trimmed), such as an API key or tenant id. A
// header that is absent or empty is handled by missing; one longer than
// MaxKeyBytes is refused (400, naming the header and the cap), never cut
// short and never passed to missing. The value is used
// as sent: authenticate it before trusting it as an identity. name must be
// a valid header field name (RFC 9110 token characters, 1 … 256 bytes).
func KeyByHeader(name string, missing OnMissing) Key {
	if !validFieldName(name) {
		return keyError(errors.New("httplimit: KeyByHeader name = " + untrusted.Quote(name) + ", want a header field name (1 … 256 RFC 9110 token characters)"))
	}
	if missing.hasFallback {
		if err := missing.fallback.Err(); err != nil {
			return keyError(wrapConfig("KeyByHeader("+name+") MissingFallback", err))
		}
	}
	name = http.CanonicalHeaderKey(name)
	errMissing := errors.New("httplimit: missing header " + name)
	errLong := errors.New("httplimit: header " + name + " is longer than " + strconv.Itoa(MaxKeyBytes) + " bytes (MaxKeyBytes); refused, never truncated")
	return Key{fn: func(r *http.Request) (string, error) {
		if vs := r.Header[name]; len(vs) > 0 {
			if v := strings.TrimSpace(vs[0]); v != "" {
				if len(v) > MaxKeyBytes {
					return "", errLong
				}
				return v, nil
			}
		}
		if missing.hasFallback {
			return missing.fallback.of(r)
		}
		return "", errMissing
	}}
}

// validFieldName reports whether s is a token (RFC 9110, section 5.6.2) of
// at most 256 bytes.
func validFieldName(s string) bool {
	if len(s) == 0 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// RoutePattern returns r.Pattern, the pattern http.ServeMux matched (Go
// 1.22+), for KeyByRoute. It is set only inside a handler registered on the
// mux: a middleware wrapped around the whole mux sees "".
func RoutePattern(r *http.Request) string { return r.Pattern }

// KeyByRoute keys a request by its route and inner's key, joined as
// route + "\x00" + inner key, so that each route has its own window per
// client. routeFunc must return a bounded set of values (a mux pattern, a
// handler name), never the raw path, or every distinct URL would create a
// key. Pass RoutePattern to use the ServeMux pattern; the middleware must
// then run inside the mux's handlers, not around the mux. An empty route is
// a route like any other (requests with no route share one window per
// client), never an error; an empty key from inner is a key error, as
// everywhere. A nil routeFunc, or an inner Key with an error, is a
// configuration error.
func KeyByRoute(routeFunc func(*http.Request) string, inner Key) Key {
	if routeFunc == nil {
		return keyError(errors.New("httplimit: KeyByRoute routeFunc is nil (pass httplimit.RoutePattern for the ServeMux pattern)"))
	}
	if err := inner.Err(); err != nil {
		return keyError(wrapConfig("KeyByRoute inner", err))
	}
	return Key{fn: func(r *http.Request) (string, error) {
		k, err := inner.of(r)
		if err != nil {
			return "", err
		}
		return routeFunc(r) + adapter.Sep + k, nil
	}}
}

// Compose keys a request by every part's key, joined by "\x00" in order.
// The first error is returned; a part's empty key is one. Put the tenant (or tier) first to use the
// key with Tiers. Compose needs at least one part, and a part with an
// error makes Compose's Key hold it.
func Compose(parts ...Key) Key {
	if len(parts) == 0 {
		return keyError(errors.New("httplimit: Compose needs at least one part"))
	}
	for i, p := range parts {
		if err := p.Err(); err != nil {
			return keyError(wrapConfig("Compose part "+strconv.Itoa(i), err))
		}
	}
	parts = append([]Key(nil), parts...)
	return Key{fn: func(r *http.Request) (string, error) {
		return adapter.JoinKeys(len(parts), func(i int) (string, error) { return parts[i].of(r) })
	}}
}
