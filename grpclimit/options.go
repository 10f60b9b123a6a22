package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/internal/untrusted"
)

// Option configures an Interceptor. An Option given a bad argument makes
// NewInterceptor return an error that names the option and the allowed
// values (UnaryServerInterceptor and StreamServerInterceptor panic with
// it); it never surfaces as a status.
type Option func(*config) error

type config struct {
	key        Key
	cost       func(ctx context.Context, fullMethod string) int64
	methodCost map[string]int64 // full method → cost
	exempt     map[string]bool  // full methods and "/service/" prefixes
	noDefaults bool             // WithoutDefaultExempt
	policyName string
	window     time.Duration
	headers    bool
	below      float64 // WithHeadersBelow's share; 0 sends the fields always
	perMessage bool
}

func defaultConfig() config {
	return config{
		key:        KeyByIP(64),
		methodCost: map[string]int64{},
		exempt:     map[string]bool{},
		policyName: "default",
		headers:    true,
	}
}

// DefaultExempt returns the methods every Interceptor passes through
// unless WithoutDefaultExempt is given: the health service (a load
// balancer's checks must not be refused when a client is over its limit)
// and server reflection, v1 and v1alpha. A trailing "/" names a whole
// service. Each call returns a new slice.
func DefaultExempt() []string {
	return []string{
		"/grpc.health.v1.Health/",
		"/grpc.reflection.v1.ServerReflection/",
		"/grpc.reflection.v1alpha.ServerReflection/",
	}
}

// configError prefixes a configuration error with where it was found,
// keeping one "grpclimit: " in front.
type configError struct {
	where string
	err   error
}

func (e *configError) Error() string {
	return "grpclimit: " + e.where + ": " + strings.TrimPrefix(e.err.Error(), "grpclimit: ")
}

func (e *configError) Unwrap() error { return e.err }

func wrapConfig(where string, err error) error { return &configError{where: where, err: err} }

// WithKey sets the key of a call. The default is KeyByIP(64): the peer's
// IP address, IPv6 grouped by /64. Behind a reverse proxy use
// KeyByXForwardedFor or KeyByForwarded. A Key holding a configuration
// error is reported by NewInterceptor.
func WithKey(k Key) Option {
	return func(c *config) error {
		if err := k.Err(); err != nil {
			return wrapConfig("WithKey", err)
		}
		c.key = k
		return nil
	}
}

// WithMethodCost charges a call to fullMethod ("/pkg.Service/Method") cost
// units instead of 1; a stream in per-message mode is charged cost per
// message. 0 makes the method free: its calls are admitted, counted and
// given the fields, and charge nothing. A cost above a key's limit is
// answered codes.FailedPrecondition, since the call could never fit; with
// a limiter that reports its Config and has no per-key limits,
// NewInterceptor refuses such a cost outright. A negative cost, a
// malformed name, or the same method twice is an error. It cannot be
// combined with WithCost.
func WithMethodCost(fullMethod string, cost int64) Option {
	return func(c *config) error {
		if err := validMethod(fullMethod, false); err != nil {
			return fmt.Errorf("grpclimit: WithMethodCost(%s, %d): %w", untrusted.Quote(fullMethod), cost, err)
		}
		if cost < 0 {
			return fmt.Errorf("grpclimit: WithMethodCost(%s, %d): want a cost ≥ 0", untrusted.Quote(fullMethod), cost)
		}
		if _, dup := c.methodCost[fullMethod]; dup {
			return fmt.Errorf("grpclimit: WithMethodCost(%s, …) given twice", untrusted.Quote(fullMethod))
		}
		c.methodCost[fullMethod] = cost
		return nil
	}
}

// WithCost sets the cost of a call from its context and full method name,
// evaluated once per call (once per stream, whose messages in per-message
// mode each cost that much). A negative result is a bug in f: the call is
// answered codes.Internal and counted Rejected. f must not be nil and
// cannot be combined with WithMethodCost.
func WithCost(f func(ctx context.Context, fullMethod string) int64) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("grpclimit: WithCost(nil), want a cost function")
		}
		c.cost = f
		return nil
	}
}

// WithExempt passes calls to the given methods through without keying,
// counting, limiting or fields, besides DefaultExempt(). Each is a full
// method name, "/pkg.Service/Method", or a whole service,
// "/pkg.Service/"; anything else is an error.
func WithExempt(methods ...string) Option {
	return func(c *config) error {
		if len(methods) == 0 {
			return errors.New("grpclimit: WithExempt(), want at least one method or service")
		}
		for _, m := range methods {
			if err := validMethod(m, true); err != nil {
				return fmt.Errorf("grpclimit: WithExempt(%s): %w", untrusted.Quote(m), err)
			}
			c.exempt[m] = true
		}
		return nil
	}
}

// WithoutDefaultExempt limits the methods of DefaultExempt() too (health
// checks, reflection) unless WithExempt names them.
func WithoutDefaultExempt() Option {
	return func(c *config) error { c.noDefaults = true; return nil }
}

// WithPolicy names the policy in the ratelimit and ratelimit-policy
// metadata (default "default") and, for a limiter that does not report its
// configuration, gives its window for w=. The rules are
// httplimit.WithPolicy's: 1 … 64 printable ASCII characters; window 0
// takes the limiter's, a non-zero window must equal it; negative is an
// error.
func WithPolicy(name string, window time.Duration) Option {
	return func(c *config) error {
		c.policyName, c.window = name, window // checked by httplimit.NewFields
		return nil
	}
}

// WithHeaders turns the ratelimit and ratelimit-policy response metadata
// on (the default) or off. RetryInfo is in every denial either way.
func WithHeaders(on bool) Option {
	return func(c *config) error { c.headers = on; return nil }
}

// WithHeadersBelow sends the fields on an admitted call only when the
// remaining quota is below share of the limit (r < share·q), as
// httplimit.WithHeadersBelow does, saving their cost on most calls of a
// client far from its limit. 0 < share ≤ 1. Denials always carry them.
func WithHeadersBelow(share float64) Option {
	return func(c *config) error {
		if !(share > 0 && share <= 1) {
			return fmt.Errorf("grpclimit: WithHeadersBelow(%v), want 0 < share ≤ 1", share)
		}
		c.below = share
		return nil
	}
}

// WithPerMessage makes the stream interceptor charge every message the
// client sends, when it is received, instead of the stream once at its
// start. The key and the cost are computed once, at the start (a key error
// refuses the stream); a message that does not fit makes the handler's
// RecvMsg return the denial, which ends the stream when the handler
// returns it. Unary calls are not affected.
func WithPerMessage() Option {
	return func(c *config) error { c.perMessage = true; return nil }
}

// validMethod checks "/service/method", or with service "/service/".
func validMethod(m string, service bool) error {
	want := `want "/pkg.Service/Method"`
	if service {
		want += ` or "/pkg.Service/"`
	}
	if len(m) < 3 || m[0] != '/' {
		return errors.New(want)
	}
	i := strings.IndexByte(m[1:], '/') + 1
	if i <= 1 || strings.IndexByte(m[i+1:], '/') >= 0 || (i == len(m)-1 && !service) {
		return errors.New(want)
	}
	return nil
}
