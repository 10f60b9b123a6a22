package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ringlimit/ringlimit/internal/adapter"
)

// Option configures a Middleware. An Option given a bad argument makes
// NewMiddleware return an error that names the option and the allowed
// values (New panics with it); it never surfaces as a response.
type Option func(*config) error

type config struct {
	key        Key
	keyErr     func(http.ResponseWriter, *http.Request, error)   // WithKeyErrorHandler; nil: the default answer
	refusal    func(http.ResponseWriter, *http.Request, Refusal) // WithRefusalHandler
	cost       func(*http.Request) int64
	deny       http.Handler
	exempt     []func(*http.Request) bool
	style      Style
	policyName string
	window     time.Duration
	below      float64 // WithHeadersBelow's share; 0 sends the fields always
	dryRun     bool    // WithDryRun
	keySet     bool    // WithKey was given
	policySet  bool    // WithPolicyName was given
	settle     bool    // WithSettle
	inFlight   bool    // WithInFlight
}

func defaultConfig() config {
	return config{
		key:        KeyByIP(64),
		style:      HeadersDraft,
		policyName: "default",
	}
}

func wrapConfig(where string, err error) error {
	return &adapter.ConfigError{Prefix: "httplimit: ", Where: where, Err: err}
}

// WithKey sets the key of a request. The default is KeyByIP(64): the
// client IP from r.RemoteAddr, IPv6 grouped by /64. Behind a reverse proxy
// use KeyByXForwardedFor or KeyByForwarded. A Key holding a configuration
// error is reported by NewMiddleware.
func WithKey(k Key) Option {
	return func(c *config) error {
		if err := k.Err(); err != nil {
			return wrapConfig("WithKey", err)
		}
		c.key, c.keySet = k, true
		return nil
	}
}

// WithKeyErrorHandler sets the response written when the key function
// returns an error (an error about the request: a missing header, a forged
// chain). The default writes 400 Bad Request with the error text. The
// request is counted as Rejected either way. A handler that writes
// nothing leaves the default answer (see WithRefusalHandler, which
// answers every kind of refusal). h must not be nil.
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
// Middleware). A handler that writes nothing leaves the default answer
// (see WithRefusalHandler, which answers every kind of refusal). h must
// not be nil.
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
// be safe for concurrent use, and not nil. Given several times, a request
// is exempt if any f says so. It has the shape and meaning of
// grpclimit.WithExempt.
func WithExempt(f func(*http.Request) bool) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("httplimit: WithExempt(nil), want a function")
		}
		c.exempt = append(c.exempt, f)
		return nil
	}
}

// WithHeaders selects the rate-limit header styles (default HeadersDraft).
// WithHeaders(0) writes none (Retry-After is still written on 429 and
// 503). Bits other than HeadersDraft, HeadersLegacy and HeadersLegacyUnix,
// or both legacy styles at once, are an error. It has
// the shape and meaning of grpclimit.WithHeaders, which has HeadersDraft
// only.
func WithHeaders(s Style) Option {
	return func(c *config) error {
		if s&^(HeadersDraft|HeadersLegacy|HeadersLegacyUnix) != 0 || s&HeadersLegacy != 0 && s&HeadersLegacyUnix != 0 {
			return fmt.Errorf("httplimit: WithHeaders(%d), want a combination of HeadersDraft (%d) and one of HeadersLegacy (%d) and HeadersLegacyUnix (%d), or 0", s, HeadersDraft, HeadersLegacy, HeadersLegacyUnix)
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
		if err := adapter.CheckShare("httplimit: ", share); err != nil {
			return err
		}
		c.below = share
		return nil
	}
}

// WithPolicyName names the policy in the RateLimit and RateLimit-Policy fields
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
func WithPolicyName(name string, window time.Duration) Option {
	return func(c *config) error {
		if err := adapter.CheckPolicy("httplimit: ", name, window); err != nil {
			return err
		}
		c.policyName, c.window, c.policySet = name, window, true
		return nil
	}
}

// WithDryRun makes the middleware decide and count every request but
// refuse none (shadow mode), to watch what a new limit would refuse before
// enforcing it. A request the limiter refuses (429, 503 for MaxKeys, 413)
// is counted WouldDeny, carries the rate-limit fields it would have had
// (the denial's r= and t=; no Retry-After, which belongs to the refusal)
// and is passed to the next handler; an admitted one is charged and
// served as usual. A key error or a negative cost is counted Rejected, a
// backend failure Errors, and the request is served all the same. Only a
// request whose context ended before a failed limiter answered is still
// not served (counted Canceled): its client has gone. It has the meaning
// of grpclimit.WithDryRun.
func WithDryRun() Option {
	return func(c *config) error { c.dryRun = true; return nil }
}
