package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A checker's dials (docs/design.md §10) end when Close cancels l.bg,
// and Close waits for them. go-redis dials a new connection in a
// goroutine of its own, with a context detached from the caller's, and
// retries a failed dial (DialerRetries attempts, DialTimeout each, a
// backoff between): cancelling a check ends none of that, so a dial to a
// host that drops SYNs could outlive Close by minutes. So a checker's
// client makes one call of its dialer per dial (DialerRetries 1), and the
// attempts, their timeouts and the backoffs are checkDialer's, each
// ended by l.bg. The invariants:
//
//   - A dial begins (l.dials.Add) only under nodeMu (a checker's dial
//     is never on a decision's path) while l.closed is false, and Close sets l.closed under nodeMu before l.dials.Wait
//     (closeCheckers): every Add happens before the Wait, as
//     sync.WaitGroup requires, and a dial asked for after it makes no
//     attempt (errDialClosed).
//   - Close cancels l.bg before that Wait: an attempt or a backoff in
//     progress then ends at once (with a Dialer that heeds its context;
//     one that does not is waited for), and no attempt begins after.
//   - A dial that connects after l.bg was cancelled closes its
//     connection and returns an error: no connection is made for a
//     closed checker. One that returned before is the checker's client's,
//     whose Close (after the Wait) closes it, or go-redis closes it when
//     it finds its pool closed.
//
// What go-redis's goroutine does once the dialer has returned (file the
// result, close a connection for a closed pool) waits for nothing. Left:
// after PoolSize failed dials go-redis starts a goroutine (tryDial) that
// dials once a second until one connects; after Close its dial is
// refused and it ends at its next wake, up to a second after Close.

// errDialClosed is a checker's dial asked for after Close.
var errDialClosed = errors.New("redisstore: the limiter is closed: the checker dials no more")

// beginDial reports whether a checker's dial may begin, and counts it in
// l.dials if so (see above); the dial calls l.dials.Done when it ends.
func (l *Limiter) beginDial() bool {
	l.nodeMu.Lock()
	defer l.nodeMu.Unlock()
	if l.closed.Load() {
		return false
	}
	l.dials.Add(1)
	return true
}

// checkDialer returns the dialer of ck's client, made from the node's
// options o (normalised, so o.Dialer is set): its connections are
// checkConns (checkconn.go), ck.dialing counts its dials in progress, and
// it tries o.DialerRetries times, each attempt bounded by o.DialTimeout,
// with go-redis's backoff between (DialerRetryBackoff, or
// DialerRetryTimeout), as go-redis would, but within l.bg.
func (l *Limiter) checkDialer(ck *checker, o *redis.Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial, budget := heedfulDialer(o), l.live
	attempts, timeout := max(o.DialerRetries, 1), o.DialTimeout
	backoff := o.DialerRetryBackoff
	if backoff == nil {
		d := o.DialerRetryTimeout
		if d <= 0 {
			d = 100 * time.Millisecond // go-redis's
		}
		backoff = func(int) time.Duration { return d }
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !l.beginDial() {
			return nil, errDialClosed
		}
		defer l.dials.Done()
		ck.dialing.Add(1)
		defer ck.dialing.Add(-1)
		// go-redis's context bounds its one attempt by DialTimeout (the
		// checker's client makes one), and nothing else ends it: the
		// attempts below apply DialTimeout each themselves, so only its
		// values are kept; l.bg ends them.
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		defer context.AfterFunc(l.bg, cancel)()
		var err error
		for i := range attempts {
			if l.bg.Err() != nil {
				return nil, errors.Join(errDialClosed, err)
			}
			if i > 0 {
				t := time.NewTimer(max(backoff(i-1), 0))
				select {
				case <-ctx.Done():
					t.Stop()
					return nil, err
				case <-t.C:
				}
			}
			actx, acancel := ctx, context.CancelFunc(func() {})
			if timeout > 0 {
				actx, acancel = context.WithTimeout(ctx, timeout)
			}
			cn, derr := dial(actx, network, addr)
			acancel()
			if derr == nil {
				if l.bg.Err() != nil { // Close came as it connected
					_ = cn.Close()
					return nil, errDialClosed
				}
				return &checkConn{Conn: cn, budget: budget}, nil
			}
			err = derr
			if ctx.Err() != nil {
				break
			}
		}
		return nil, err
	}
}

// heedfulDialer returns o.Dialer, or, when that is go-redis's own dialer
// with TLS (redis.NewDialer, which dials with tls.DialWithDialer and so
// ignores its context: Close would wait out DialTimeout), the same dial
// made with tls.Dialer, which heeds it. go-redis's own is told by its
// function's name, which inlining may prefix with its caller's
// ("(*Options).init.NewDialer.func1"); a dialer of any other name is
// kept, and Close waits for it as it is.
func heedfulDialer(o *redis.Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if o.TLSConfig == nil || o.Dialer == nil {
		return o.Dialer
	}
	f := runtime.FuncForPC(reflect.ValueOf(o.Dialer).Pointer())
	if f == nil || !strings.HasPrefix(f.Name(), "github.com/redis/go-redis/v9.") || !strings.Contains(f.Name(), "NewDialer.func") {
		return o.Dialer
	}
	d := &tls.Dialer{
		NetDialer: &net.Dialer{
			Timeout:         o.DialTimeout,
			KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}, // go-redis's
		},
		Config: o.TLSConfig,
	}
	return d.DialContext
}
