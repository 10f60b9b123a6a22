package redisstore

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// writeSignal is closed by the first write carrying mark once armed.
type writeSignal struct {
	mu   sync.Mutex
	mark []byte
	ch   chan struct{} // nil while not armed
}

// arm returns the channel the next write carrying mark closes.
func (w *writeSignal) arm() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ch = make(chan struct{})
	return w.ch
}

// watchWrites wraps a connection and signals when a write carrying the
// mark has gone out on it: the call is then in flight.
type watchWrites struct {
	net.Conn
	sig *writeSignal
}

func (c watchWrites) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if bytes.Contains(b, c.sig.mark) {
		c.sig.mu.Lock()
		if c.sig.ch != nil {
			close(c.sig.ch)
			c.sig.ch = nil
		}
		c.sig.mu.Unlock()
	}
	return n, err
}

// watchedClient is a client of p whose writes carrying mark w signals.
func watchedClient(tb testing.TB, p *proxy, w *writeSignal) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: p.addr(), MaxRetries: -1, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		Dialer: func(dctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(dctx, network, addr)
			if err != nil {
				return nil, err
			}
			return watchWrites{conn, w}, nil
		},
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// "A call whose caller's context ends before Redis answers is never
// admitted, under any policy ... This holds on every path: ... hybrid exact
// decisions" (README, "Deadlines and batching"). A caller whose context has
// no deadline (as an HTTP request's) makes its own round trip; here its
// call is written, the path to Redis holds it (the proxy's blackhole), the
// caller cancels, and only then does the path heal and Redis run the call.
// Redis answered after the cancel, so the caller must not be admitted. A
// late return is documented (go-redis does not interrupt the read); an
// admission is not. For a hybrid limiter's exact first decision on a key
// and a plain limiter's decision; a reservation is the exception: the one
// Redis made is returned, so that its Cancel can give the units back.
func TestExactDecisionCancelledInFlightNotAdmitted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []Option
		reserve bool
	}{
		{"hybrid", []Option{WithHybrid(time.Minute, 1), WithReplicas(1)}, false},
		{"plain", nil, false},
		{"plain/reserve", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			p := startProxy(t, s.Addr())
			w := &writeSignal{mark: []byte("{victim}")}
			c := watchedClient(t, p, w)
			l := mustNew(t, c, engine.Config{Limit: 10, Window: time.Minute}, tc.opts...)
			if d, err := l.AllowN(ctx, "warm", 1); err != nil || !d.Allowed { // the script is loaded
				t.Fatalf("%+v %v", d, err)
			}
			if tc.reserve { // the reservation's script is loaded too
				if r, err := l.Reserve(ctx, "warm", 1); err != nil || !r.Decision().Allowed {
					t.Fatalf("%+v %v", r.Decision(), err)
				}
			}
			sent := w.arm()
			heal := p.blackhole()
			defer heal()
			cctx, cancel := context.WithCancel(ctx)
			type result struct {
				d   engine.Decision
				err error
				res Reservation
			}
			done := make(chan result, 1)
			go func() {
				if tc.reserve {
					res, err := l.Reserve(cctx, "victim", 1)
					done <- result{res.Decision(), err, res}
					return
				}
				d, err := l.AllowN(cctx, "victim", 1)
				done <- result{d: d, err: err}
			}()
			select {
			case <-sent:
			case r := <-done:
				t.Fatalf("returned before its call went out: %+v %v", r.d, r.err)
			case <-time.After(hangBound):
				t.Fatal("the call never went out")
			}
			cancel() // Redis has not run the call: the path holds it
			heal()
			r := <-done
			if tc.reserve {
				// A reservation Redis made is returned even when its caller
				// left meanwhile, so that Cancel gives its units back (what
				// httplimit's WithInFlight and WithSettle do).
				if r.err != nil || !r.d.Allowed {
					t.Fatalf("the reservation Redis made: %+v %v, want it returned", r.d, r.err)
				}
				if got := storedUnits(t, client(t, s), l, "victim"); got != 1 {
					t.Fatalf("Redis holds %d units for the reservation, want 1", got)
				}
				if ok, err := r.res.Cancel(ctx); !ok || err != nil {
					t.Fatalf("Cancel of the reservation whose caller left: %v %v, want its units back", ok, err)
				}
				if got := storedUnits(t, client(t, s), l, "victim"); got != 0 {
					t.Errorf("Redis holds %d units after the reservation's Cancel, want 0", got)
				}
				return
			}
			st := l.Stats()
			if r.d.Allowed || !errors.Is(r.err, context.Canceled) || errors.Is(r.err, ErrUnavailable) {
				t.Errorf("caller cancelled before Redis ran its call: %+v, error %v; want not admitted, an error wrapping context.Canceled and not ErrUnavailable (stats %+v)", r.d, r.err, st)
			}
			if st.CallerGone != 1 || st.Failures != 0 {
				t.Errorf("stats %+v, want CallerGone 1 and no failure", st)
			}
			if got := storedUnits(t, client(t, s), l, "victim"); got != 1 {
				t.Errorf("Redis holds %d units for the call answered after its caller left, want 1 (it ran)", got)
			}
		})
	}
}
