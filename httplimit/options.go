package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/internal/untrusted"
)

// Option configures a Middleware. An Option given a bad argument makes
// NewMiddleware return an error that names the option and the allowed
// values (New panics with it); it never surfaces as a response.
type Option func(*config) error

type config struct {
	key        Key
	keyErr     func(http.ResponseWriter, *http.Request, error)
	cost       func(*http.Request) int64
	deny       http.Handler
	exempt     func(*http.Request) bool
	style      Style
	policyName string
	window     time.Duration
	below      float64 // WithHeadersBelow's share; 0 sends the fields always
}

func defaultConfig() config {
	return config{
		key:        KeyByIP(64),
		keyErr:     defaultKeyError,
		style:      HeadersDraft,
		policyName: "default",
	}
}

// configError prefixes a configuration error with where it was found,
// keeping one "httplimit: " in front.
type configError struct {
	where string
	err   error
}

func (e *configError) Error() string {
	return "httplimit: " + e.where + ": " + strings.TrimPrefix(e.err.Error(), "httplimit: ")
}

func (e *configError) Unwrap() error { return e.err }

func wrapConfig(where string, err error) error { return &configError{where: where, err: err} }

// WithKey sets the key of a request. The default is KeyByIP(64): the
// client IP from r.RemoteAddr, IPv6 grouped by /64. Behind a reverse proxy
// use KeyByXForwardedFor or KeyByForwarded. A Key holding a configuration
// error is reported by NewMiddleware.
func WithKey(k Key) Option {
	return func(c *config) error {
		if err := k.Err(); err != nil {
			return wrapConfig("WithKey", err)
		}
		c.key = k
		return nil
	}
}

// WithKeyErrorHandler sets the response written when the key function
// returns an error (an error about the request: a missing header, a forged
// chain). The default writes 400 Bad Request with the error text. The
// request is counted as Rejected either way. h must not be nil.
func WithKeyErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("httplimit: WithKeyErrorHandler(nil), want a handler")
		}
		c.keyErr = h
		return nil
	}
}

// WithCost sets the number of units a request consumes (default 1). A cost
// of 0 makes the request free: it is admitted and charges nothing. A cost
// above the key's limit is answered 413 Content Too Large, since the
// request could never fit. A negative cost is a bug in f, answered 500 and
// counted Rejected. f must not be nil.
func WithCost(f func(*http.Request) int64) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("httplimit: WithCost(nil), want a cost function")
		}
		c.cost = f
		return nil
	}
}

// WithDenyHandler sets the handler of a 429 denial. Retry-After and the
// rate-limit headers are set before it runs, and DecisionFrom(r.Context())
// returns the denial. The default writes a small JSON or text body (see
// Middleware). h must not be nil.
func WithDenyHandler(h http.Handler) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("httplimit: WithDenyHandler(nil), want a handler")
		}
		c.deny = h
		return nil
	}
}

// WithExempt exempts the requests for which f returns true: they are passed
// through without being keyed, counted, limited or given headers. f must
// not be nil.
func WithExempt(f func(*http.Request) bool) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("httplimit: WithExempt(nil), want a function")
		}
		c.exempt = f
		return nil
	}
}

// WithHeaders selects the rate-limit header styles (default HeadersDraft).
// WithHeaders(0) writes none (Retry-After is still written on 429 and
// 503). Bits other than HeadersDraft and HeadersLegacy are an error.
func WithHeaders(s Style) Option {
	return func(c *config) error {
		if s&^(HeadersDraft|HeadersLegacy) != 0 {
			return fmt.Errorf("httplimit: WithHeaders(%d), want a combination of HeadersDraft (%d) and HeadersLegacy (%d), or 0", s, HeadersDraft, HeadersLegacy)
		}
		c.style = s
		return nil
	}
}

// WithHeadersBelow sends the rate-limit fields on an admitted response only
// when the remaining quota is below share of the limit (r < share·q), as
// the draft allows (section 6.2: "only when a given quota is close to
// exhaustion"), saving their cost on most responses of a client far from
// its limit. 0 < share ≤ 1; the default sends them always. Denials always
// carry them.
func WithHeadersBelow(share float64) Option {
	return func(c *config) error {
		if !(share > 0 && share <= 1) {
			return fmt.Errorf("httplimit: WithHeadersBelow(%v), want 0 < share ≤ 1", share)
		}
		c.below = share
		return nil
	}
}

// maxPolicyName bounds WithPolicy's name, so that a header value built
// from it fits the middleware's stack buffer.
const maxPolicyName = 64

// WithPolicy names the policy in the RateLimit and RateLimit-Policy fields
// (default "default"): 1 … 64 printable ASCII characters; quotes and
// backslashes are escaped as a Structured Field String requires. Stacked
// middlewares should have distinct names, since each adds its own list
// member.
//
// window is 0 to take the window from the limiter (the usual case: an
// *engine.Engine reports it through Config). A non-zero window must equal
// the limiter's Config().Window, or NewMiddleware fails; for a limiter
// that does not report its configuration, it gives the w= of
// RateLimit-Policy (see Middleware for t=). A negative window is an error.
func WithPolicy(name string, window time.Duration) Option {
	return func(c *config) error {
		if len(name) == 0 || len(name) > maxPolicyName {
			return fmt.Errorf("httplimit: WithPolicy name = %s, want 1 … %d printable ASCII characters", untrusted.Quote(name), maxPolicyName)
		}
		for i := 0; i < len(name); i++ {
			if name[i] < 0x20 || name[i] > 0x7e {
				return fmt.Errorf("httplimit: WithPolicy name = %s has byte %#x at %d, want printable ASCII (0x20 … 0x7e)", untrusted.Quote(name), name[i], i)
			}
		}
		if window < 0 {
			return fmt.Errorf("httplimit: WithPolicy window = %v, want 0 (the limiter's) or > 0", window)
		}
		c.policyName = escapeName(name)
		c.window = window
		return nil
	}
}

// escapeName escapes quotes and backslashes for a Structured Field String.
func escapeName(s string) string {
	if !strings.ContainsAny(s, `"\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
