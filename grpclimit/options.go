package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/internal/adapter"
	"github.com/ringlimit/ringlimit/internal/untrusted"
)

// Option configures an Interceptor. An Option given a bad argument makes
// NewInterceptor return an error that names the option and the allowed
// values (UnaryServerInterceptor and StreamServerInterceptor panic with
// it); it never surfaces as a status.
type Option func(*config) error

type config struct {
	key           Key
	cost          func(ctx context.Context, fullMethod string) int64
	methodCost    map[string]int64 // full method → cost
	defaultExempt map[string]bool  // DefaultExempt(): full methods and "/service/" prefixes
	exempt        []func(ctx context.Context, fullMethod string) bool
	noDefaults    bool // WithoutDefaultExempt
	policyName    string
	window        time.Duration
	style         Style
	below         float64 // WithHeadersBelow's share; 0 sends the fields always
	perMessage    bool
	dryRun        bool // WithDryRun
	keySet        bool // WithKey was given
	policySet     bool // WithPolicyName was given
	settle        bool // WithSettle
	inFlight      bool // WithInFlight
}

func defaultConfig() config {
	return config{
		key:           KeyByIP(64),
		methodCost:    map[string]int64{},
		defaultExempt: map[string]bool{},
		policyName:    "default",
		style:         HeadersDraft,
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

func wrapConfig(where string, err error) error {
	return &adapter.ConfigError{Prefix: "grpclimit: ", Where: where, Err: err}
}

// WithKey sets the key of a call. The default is KeyByIP(64): the peer's
// IP address, IPv6 grouped by /64. Behind a reverse proxy use
// KeyByXForwardedFor or KeyByForwarded. A Key holding a configuration
// error is reported by NewInterceptor.
func WithKey(k Key) Option {
	return func(c *config) error {
		if err := k.Err(); err != nil {
			return wrapConfig("WithKey", err)
		}
		c.key, c.keySet = k, true
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

// WithExempt exempts the calls for which f returns true, besides
// DefaultExempt(): they are passed through without being keyed, counted,
// limited or given fields. f gets the call's context and its full method
// name, "/pkg.Service/Method"; it must be safe for concurrent use, and not
// nil. Given several times, a call is exempt if any f says so. It has the
// shape and meaning of httplimit.WithExempt.
func WithExempt(f func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("grpclimit: WithExempt(nil), want a function")
		}
		c.exempt = append(c.exempt, f)
		return nil
	}
}

// WithoutDefaultExempt limits the methods of DefaultExempt() too (health
// checks, reflection) unless WithExempt names them.
func WithoutDefaultExempt() Option {
	return func(c *config) error { c.noDefaults = true; return nil }
}

// WithPolicyName names the policy in the ratelimit and ratelimit-policy
// metadata (default "default"): 1 … 64 printable ASCII characters; quotes
// and backslashes are escaped as a Structured Field String requires.
// window is 0 to take the window from the limiter; a non-zero window must
// equal the limiter's Config().Window, or NewInterceptor fails; for a
// limiter that does not report its configuration, it gives the w= of
// ratelimit-policy. A negative window is an error. It has the shape and
// meaning of httplimit.WithPolicyName.
func WithPolicyName(name string, window time.Duration) Option {
	return func(c *config) error {
		if err := adapter.CheckPolicy("grpclimit: ", name, window); err != nil {
			return err
		}
		c.policyName, c.window, c.policySet = name, window, true
		return nil
	}
}

// Style is a set of rate-limit field styles for WithHeaders.
type Style uint8

// HeadersDraft sends the ratelimit-policy and ratelimit response metadata,
// with the values of httplimit.HeadersDraft (on by default). It has
// httplimit.HeadersDraft's value; gRPC has no counterpart of HTTP's legacy
// X-RateLimit-* headers.
const HeadersDraft Style = 1

// WithHeaders selects the rate-limit field styles (default HeadersDraft);
// WithHeaders(0) sends none. RetryInfo is in every denial either way.
// Bits other than HeadersDraft are an error. It has the shape and meaning
// of httplimit.WithHeaders.
func WithHeaders(s Style) Option {
	return func(c *config) error {
		if s&^HeadersDraft != 0 {
			return fmt.Errorf("grpclimit: WithHeaders(%d), want HeadersDraft (%d) or 0", s, HeadersDraft)
		}
		c.style = s
		return nil
	}
}

// WithHeadersBelow sends the fields on an admitted call only when the
// remaining quota is below share of the limit (r < share·q), as
// httplimit.WithHeadersBelow does, saving their cost on most calls of a
// client far from its limit. 0 < share ≤ 1. Denials always carry them.
func WithHeadersBelow(share float64) Option {
	return func(c *config) error {
		if err := adapter.CheckShare("grpclimit: ", share); err != nil {
			return err
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

// WithDryRun makes the interceptor decide and count every call (stream,
// or message with WithPerMessage) but refuse none (shadow mode), to watch
// what a new limit would refuse before enforcing it. A call the limiter
// refuses (ResourceExhausted, Unavailable for MaxKeys, FailedPrecondition)
// is counted WouldDeny, carries the metadata it would have had (the
// denial's r= and t=; no status, so no RetryInfo) and goes on to the
// handler; an admitted one is charged and served as usual. A key error or
// a negative cost is counted Rejected, a backend failure Errors, and the
// call is served all the same. Only a call whose context ended before a
// failed limiter answered still ends with the context's status (counted
// Canceled): its client has gone. It has the meaning of
// httplimit.WithDryRun.
func WithDryRun() Option {
	return func(c *config) error { c.dryRun = true; return nil }
}
