package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/internal/adapter"
	"github.com/ringlimit/ringlimit/internal/untrusted"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClientOption configures a Client. As with Option, a bad argument is an
// error from NewClient, never a failed call.
type ClientOption func(*clientConfig) error

type clientConfig struct {
	key        func(ctx context.Context, cc *grpc.ClientConn, fullMethod string) string
	methodCost map[string]int64
	maxWait    time.Duration // 0: bounded by the call's context only
}

// WithClientKey sets the key of an outgoing call. The default is the
// connection's target (cc.Target()), so that all calls to one API share
// its egress budget. f must be safe for concurrent use and return a
// bounded set of keys; it must not be nil. An empty key (or one of only
// white space) is a key error: the call fails with codes.InvalidArgument.
func WithClientKey(f func(ctx context.Context, cc *grpc.ClientConn, fullMethod string) string) ClientOption {
	return func(c *clientConfig) error {
		if f == nil {
			return errors.New("grpclimit: WithClientKey(nil), want a key function")
		}
		c.key = f
		return nil
	}
}

// WithClientCost charges an outgoing call to fullMethod cost units instead
// of 1 (0: free). The rules of WithMethodCost apply.
func WithClientCost(fullMethod string, cost int64) ClientOption {
	return func(c *clientConfig) error {
		if err := validMethod(fullMethod, false); err != nil {
			return fmt.Errorf("grpclimit: WithClientCost(%s, %d): %w", untrusted.Quote(fullMethod), cost, err)
		}
		if cost < 0 {
			return fmt.Errorf("grpclimit: WithClientCost(%s, %d): want a cost ≥ 0", untrusted.Quote(fullMethod), cost)
		}
		if _, dup := c.methodCost[fullMethod]; dup {
			return fmt.Errorf("grpclimit: WithClientCost(%s, …) given twice", untrusted.Quote(fullMethod))
		}
		c.methodCost[fullMethod] = cost
		return nil
	}
}

// WithMaxWait bounds the total time a call waits for the limiter, besides
// its context's deadline: a call that would wait longer fails at once.
// d > 0. The default waits as long as the call's deadline allows, and
// without a deadline until its context is cancelled.
func WithMaxWait(d time.Duration) ClientOption {
	return func(c *clientConfig) error {
		if d <= 0 {
			return fmt.Errorf("grpclimit: WithMaxWait(%v), want > 0", d)
		}
		c.maxWait = d
		return nil
	}
}

// minWait is the shortest wait of a limited call, so that a limiter
// answering "limited" with a zero RetryAfter cannot make Wait spin.
const minWait = time.Millisecond

// timers is the Client's clock: the time now, and a timer. Tests replace
// it so that no test sleeps.
type timers interface {
	Now() time.Time
	After(d time.Duration) (<-chan time.Time, func() bool)
}

type realTimers struct{}

func (realTimers) Now() time.Time { return time.Now() }

func (realTimers) After(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Client paces outgoing calls with a limiter, for an egress limit towards
// a third-party API: a call the limiter refuses waits for the limiter's
// RetryAfter on a timer, then asks again, and is sent when admitted. It
// does not use engine.Wait, which waits on one engine alone: the Client
// paces a Redis limiter alike, and bounds the total wait by WithMaxWait.
// Each wait is one RetryAfter sleep, bounded by the call's deadline and
// context and by WithMaxWait:
//
//   - when the wait would end at or after the call's deadline, or take
//     the total past WithMaxWait, the call fails at once with
//     codes.ResourceExhausted and a RetryInfo detail, rather than
//     sleeping into a certain failure (counted Refused);
//   - when the context is done during the wait, or a ContextLimiter fails
//     once it is done, the call fails at once with codes.Canceled or
//     codes.DeadlineExceeded (counted Canceled), whatever Decision the
//     limiter returned with its error;
//   - a cost that can never fit, and a new key refused by MaxKeys, fail
//     at once with codes.ResourceExhausted (counted Refused); an empty
//     key, or one above MaxKeyBytes (or the engine's Config.MaxKeyBytes),
//     fails with codes.InvalidArgument (counted Refused), and the limiter
//     never sees it;
//   - a ContextLimiter that fails otherwise is followed as on the server:
//     the call is sent if its Decision is Allowed, else fails with
//     codes.Unavailable (counted Errors).
//
// A limited answer with no wait (RetryAfter ≤ 0, which a remote limiter
// might give) waits 1 ms. Under contention a woken call may find the
// window taken again and wait once more; each wait is bounded as above, and the loop ends at the
// deadline, the context's cancellation, or WithMaxWait. A call without any
// of the three can wait as long as the limiter keeps it out.
//
// A Client is safe for concurrent use and must not be copied after first
// use.
type Client struct {
	limiter  adapter.Backend
	cfg      clientConfig
	clk      timers
	_        [adapter.CacheLine]byte
	admitted atomic.Uint64
	_        [adapter.CacheLine - 8]byte
	delayed  atomic.Uint64
	_        [adapter.CacheLine - 8]byte
	refused  atomic.Uint64
	_        [adapter.CacheLine - 8]byte
	canceled atomic.Uint64
	_        [adapter.CacheLine - 8]byte
	errs     atomic.Uint64
	_        [adapter.CacheLine - 8]byte
	waited   atomic.Int64 // ns
	_        [adapter.CacheLine - 8]byte
}

// ClientStats are a Client's counters since it was built; each call is
// counted once, by how it ended. Read one by one, as Stats.
type ClientStats struct {
	Admitted uint64        // sent without waiting
	Delayed  uint64        // sent after waiting
	Refused  uint64        // not sent: the wait would pass the deadline or WithMaxWait, or the call can never fit
	Canceled uint64        // not sent: the context was done while waiting, or when the ContextLimiter failed
	Errors   uint64        // the ContextLimiter failed; its failure policy decided
	Waited   time.Duration // total of the waits as scheduled (a cancelled one: until its cancellation), by all calls
}

// NewClient returns a Client over l (a Limiter or a ContextLimiter, as
// for NewInterceptor), configured by opts; a misconfiguration is an error
// naming the option.
func NewClient(l any, opts ...ClientOption) (*Client, error) {
	c := &Client{cfg: clientConfig{methodCost: map[string]int64{}}, clk: realTimers{}}
	b, err := adapter.NewBackend(l)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: NewClient: %w", err)
	}
	c.limiter = b
	if err := errors.Join(adapter.ApplyOptions("grpclimit: ", "NewClient", &c.cfg, opts)...); err != nil {
		return nil, err
	}
	return c, nil
}

// UnaryClientInterceptor returns NewClient(l, opts...).Unary(), and panics
// if NewClient returns an error, as regexp.MustCompile does.
func UnaryClientInterceptor(l any, opts ...ClientOption) grpc.UnaryClientInterceptor {
	c, err := NewClient(l, opts...)
	if err != nil {
		panic(err)
	}
	return c.Unary()
}

// StreamClientInterceptor returns NewClient(l, opts...).Stream(), and
// panics if NewClient returns an error.
func StreamClientInterceptor(l any, opts ...ClientOption) grpc.StreamClientInterceptor {
	c, err := NewClient(l, opts...)
	if err != nil {
		panic(err)
	}
	return c.Stream()
}

// Stats returns the counters.
func (c *Client) Stats() ClientStats {
	return ClientStats{
		Admitted: c.admitted.Load(), Delayed: c.delayed.Load(), Refused: c.refused.Load(),
		Canceled: c.canceled.Load(), Errors: c.errs.Load(), Waited: time.Duration(c.waited.Load()),
	}
}

// Unary returns the unary client interceptor.
func (c *Client) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := c.Wait(ctx, c.key(ctx, cc, method), c.cost(method)); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// Stream returns the stream client interceptor: a stream waits, as a
// unary call does, before it is opened, and is charged once.
func (c *Client) Stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := c.Wait(ctx, c.key(ctx, cc, method), c.cost(method)); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

func (c *Client) key(ctx context.Context, cc *grpc.ClientConn, method string) string {
	if c.cfg.key != nil {
		return c.cfg.key(ctx, cc, method)
	}
	if cc == nil {
		return ""
	}
	return cc.Target()
}

func (c *Client) cost(method string) int64 {
	if n, ok := c.cfg.methodCost[method]; ok {
		return n
	}
	return 1
}

// Wait blocks until the limiter admits cost units for key, and returns
// nil; or returns the status error of a call that is not to be sent (see
// Client). The interceptors call it; it is exported for calls made by
// other means.
func (c *Client) Wait(ctx context.Context, key string, cost int64) error {
	if err := adapter.CheckKey("grpclimit: client-side limit: ", key); err != nil { // empty, or above MaxKeyBytes
		c.refused.Add(1)
		return status.Error(codes.InvalidArgument, err.Error())
	}
	var waited time.Duration
	for {
		d, err := c.limiter.AllowN(ctx, key, cost)
		if err != nil {
			if gone := adapter.CallerGone(ctx, err); gone != nil {
				c.canceled.Add(1)
				return status.FromContextError(gone).Err()
			}
			c.errs.Add(1)
			if d.Allowed {
				return nil
			}
			return withRetry(codes.Unavailable, "grpclimit: client-side rate limiter unavailable", d.RetryAfter)
		}
		switch adapter.Classify(d, cost) {
		case adapter.Admitted:
			if waited > 0 {
				c.delayed.Add(1)
			} else {
				c.admitted.Add(1)
			}
			return nil
		case adapter.Limited:
		case adapter.KeysFull:
			c.refused.Add(1)
			return withRetry(codes.ResourceExhausted, "grpclimit: client-side limit: too many keys", d.RetryAfter)
		case adapter.KeyRefused:
			c.refused.Add(1)
			return errLimiterKeyTooLong
		default:
			c.refused.Add(1)
			return status.Error(codes.ResourceExhausted, "grpclimit: client-side limit: call cost "+strconv.FormatInt(cost, 10)+" can never fit the limit "+strconv.FormatInt(d.Limit, 10))
		}
		// A limiter that says "limited" with no wait (a remote one may)
		// would make this loop spin: wait at least minWait.
		wait := max(d.RetryAfter, minWait)
		if dl, ok := ctx.Deadline(); ok && !c.clk.Now().Add(wait).Before(dl) {
			c.refused.Add(1)
			return withRetry(codes.ResourceExhausted, "grpclimit: client-side limit: the call's deadline comes before the limiter would admit it (retry after "+wait.String()+")", wait)
		}
		// waited ≤ maxWait (a wait is taken only when it fits), so the
		// room left cannot wrap; waited + wait could, for a RetryAfter near
		// math.MaxInt64 that a remote limiter answers.
		if c.cfg.maxWait > 0 && wait > c.cfg.maxWait-waited {
			c.refused.Add(1)
			return withRetry(codes.ResourceExhausted, "grpclimit: client-side limit: waiting "+wait.String()+" more would pass WithMaxWait "+c.cfg.maxWait.String(), wait)
		}
		start := c.clk.Now()
		ch, stop := c.clk.After(wait)
		select {
		case <-ch:
		case <-ctx.Done():
			stop()
			c.waited.Add(int64(c.clk.Now().Sub(start)))
			c.canceled.Add(1)
			return status.FromContextError(ctx.Err()).Err()
		}
		waited += wait
		c.waited.Add(int64(wait))
	}
}
