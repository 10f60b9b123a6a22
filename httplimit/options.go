package httplimit

import (
	"net/http"
	"strings"
	"time"
)

// Option configures a Middleware.
type Option func(*config)

type config struct {
	key        KeyFunc
	keyErr     func(http.ResponseWriter, *http.Request, error)
	cost       func(*http.Request) int64
	deny       http.Handler
	exempt     func(*http.Request) bool
	style      Style
	policyName string
	window     time.Duration
}

func defaultConfig() config {
	return config{
		key:        KeyByIP(64),
		keyErr:     defaultKeyError,
		style:      HeadersDraft,
		policyName: "default",
	}
}

// WithKey sets the function that maps a request to its limiter key. The
// default is KeyByIP(64): the client IP from r.RemoteAddr, IPv6 grouped by
// /64. Behind a reverse proxy use KeyByRealIP.
func WithKey(k KeyFunc) Option { return func(c *config) { c.key = k } }

// WithKeyErrorHandler sets the response written when the key function
// returns an error. The default writes 400 Bad Request with the error text.
// The request is counted as Rejected either way.
func WithKeyErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *config) { c.keyErr = h }
}

// WithCost sets the number of units a request consumes (default 1). A cost
// ≤ 0 is answered 400; a cost above the key's limit is answered 413 Content
// Too Large, since the request could never fit.
func WithCost(f func(*http.Request) int64) Option { return func(c *config) { c.cost = f } }

// WithDenyHandler sets the handler of a 429 denial. Retry-After and the
// rate-limit headers are set before it runs, and DecisionFrom(r.Context())
// returns the denial. The default writes a small JSON or text body (see
// Middleware).
func WithDenyHandler(h http.Handler) Option { return func(c *config) { c.deny = h } }

// WithExempt exempts the requests for which f returns true: they are passed
// through without being keyed, counted, limited or given headers.
func WithExempt(f func(*http.Request) bool) Option { return func(c *config) { c.exempt = f } }

// WithHeaders selects the rate-limit header styles (default HeadersDraft).
// WithHeaders(0) writes none (Retry-After is still written on 429 and 503).
func WithHeaders(s Style) Option { return func(c *config) { c.style = s } }

// WithPolicy names the policy in the RateLimit and RateLimit-Policy fields
// (default "default") and gives the engine's window, which the middleware
// cannot read from a Limiter. Pass the same Window as engine.Config.Window.
//
// Without a window (0, the default), RateLimit-Policy has no w= parameter,
// and on admitted requests RateLimit has no t= parameter and
// X-RateLimit-Reset is omitted: only a denial knows its wait. With a
// window, an admitted request reports t = the window in whole seconds,
// rounded up: an upper bound on when the units admitted now leave it.
// Characters of name other than printable ASCII are dropped; quotes and
// backslashes are escaped as a Structured Field string requires.
func WithPolicy(name string, window time.Duration) Option {
	return func(c *config) {
		c.policyName = sanitizeName(name)
		c.window = window
	}
}

func sanitizeName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch < 0x20 || ch > 0x7e {
			continue
		}
		if ch == '"' || ch == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(ch)
	}
	return b.String()
}
