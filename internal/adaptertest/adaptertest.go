// Package adaptertest holds what httplimit's and grpclimit's tests share:
// an engine on a manual clock, fake limiters, done contexts, a checker of
// field values and an independent parser of the RateLimit fields.
package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/callergone"
)

// T0 is the instant every test engine starts at. It is aligned to a 10 s
// window, so FixedWindow waits are exact.
var T0 = time.Unix(1_700_000_000, 0)

// NewEngine returns an engine over cfg on a ManualClock set to T0, with
// Window 10 s and Limit limit where cfg leaves them zero, closed when the
// test ends.
func NewEngine(tb testing.TB, cfg engine.Config, limit int64) (*engine.Engine, *engine.ManualClock) {
	tb.Helper()
	clk := engine.NewManualClock(T0)
	cfg.Clock = clk
	if cfg.Window == 0 {
		cfg.Window = 10 * time.Second
	}
	if cfg.Limit == 0 {
		cfg.Limit = limit
	}
	e, err := engine.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Close() })
	return e, clk
}

// WantValues checks that got, the lines of one field (an HTTP header's
// or a metadata key's), are exactly want, in order; no want means the
// field is absent. what names the field in the error.
func WantValues(tb testing.TB, what string, got []string, want ...string) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Errorf("%s = %q, want %q", what, got, want)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			tb.Errorf("%s = %q, want %q", what, got, want)
			return
		}
	}
}

// ErrBackend stands in for redisstore.ErrUnavailable.
var ErrBackend = errors.New("backend unavailable")

// LimiterFunc adapts a function to the adapters' ContextLimiter.
type LimiterFunc func(ctx context.Context, key string, n int64) (engine.Decision, error)

// AllowN calls f.
func (f LimiterFunc) AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) {
	return f(ctx, key, n)
}

// Remote is a ContextLimiter that answers from Next and records, per
// call, the key, Trace's reading of the context (when Trace is set) and
// ctx.Err(). It is safe for concurrent use; read the records after the
// calls have returned.
type Remote struct {
	Next  func(key string, n int64) (engine.Decision, error)
	Trace func(context.Context) string

	mu     sync.Mutex
	Keys   []string
	Traces []string
	Errs   []error
}

// AllowN records the call and answers Next's decision.
func (f *Remote) AllowN(ctx context.Context, key string, n int64) (engine.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Keys = append(f.Keys, key)
	if f.Trace != nil {
		f.Traces = append(f.Traces, f.Trace(ctx))
	}
	f.Errs = append(f.Errs, ctx.Err())
	return f.Next(key, n)
}

// ConfiguredRemote is a Remote that reports Cfg as its Config, as a
// redisstore limiter does.
type ConfiguredRemote struct {
	Remote
	Cfg engine.Config
}

// Config returns c.Cfg.
func (c *ConfiguredRemote) Config() engine.Config { return c.Cfg }

// Recorder is a Limiter that records every key it is asked for. It passes
// the decision to E, or, with E nil, admits everything (Limit 100,
// Remaining 99). It has no Config. It is safe for concurrent use.
type Recorder struct {
	E *engine.Engine

	mu   sync.Mutex
	keys []string
}

// AllowN records key and decides.
func (r *Recorder) AllowN(key string, n int64) engine.Decision {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
	if r.E != nil {
		return r.E.AllowN(key, n)
	}
	return engine.Decision{Allowed: true, Limit: 100, Remaining: 99}
}

// Keys returns the keys asked for, in order.
func (r *Recorder) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

// Last returns the last key asked for, or "".
func (r *Recorder) Last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keys) == 0 {
		return ""
	}
	return r.keys[len(r.keys)-1]
}

// FailOpenOnCancel is a ContextLimiter whose failure policy admits: it
// answers a call whose caller has gone (callergone: its context ended, or
// its deadline passed; or the context ends while it waits, when Block is
// set) with Allowed and an error wrapping the context's error, as a
// fail-open Redis limiter did before it told a caller's cancel from a
// backend failure. It admits a live call with Limit 5, Remaining 4.
type FailOpenOnCancel struct {
	Block   bool
	Entered chan struct{} // when Block is set and Entered not nil: receives once per call, before it waits
}

// AllowN answers as FailOpenOnCancel says.
func (f *FailOpenOnCancel) AllowN(ctx context.Context, _ string, _ int64) (engine.Decision, error) {
	if f.Block {
		if f.Entered != nil {
			f.Entered <- struct{}{}
		}
		<-ctx.Done()
	}
	if err := callergone.Err(ctx); err != nil {
		return engine.Decision{Allowed: true}, fmt.Errorf("redis: %w", err)
	}
	return engine.Decision{Allowed: true, Limit: 5, Remaining: 4}, nil
}

// DoneContext is a context that has ended, and the error it ended with.
type DoneContext struct {
	Name string
	Ctx  context.Context
	Err  error // context.Canceled or context.DeadlineExceeded
}

// DoneContexts returns a cancelled context, one past its deadline, and one
// past its deadline whose timer has not fired (LateTimer), whose caller has
// gone as surely as the second's.
func DoneContexts() []DoneContext {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	cancel() // the deadline had passed already: Err stays DeadlineExceeded
	return []DoneContext{
		{"canceled", canceled, context.Canceled},
		{"deadline", expired, context.DeadlineExceeded},
		{"deadline, timer not fired", LateTimer(context.Background()), context.DeadlineExceeded},
	}
}

// LateTimer returns a context under parent whose deadline has passed
// (1970) while its timer has not fired: its Done and Err are parent's, as
// a real context's are in the moment after its deadline, which on a busy
// machine lasts milliseconds. A test gets that moment for certain from it.
func LateTimer(parent context.Context) context.Context { return lateTimer{parent} }

type lateTimer struct{ context.Context }

func (lateTimer) Deadline() (time.Time, bool) { return time.Unix(1, 0), true }

// HangBound is how long Await waits: a bound on a hang, never a verdict
// on speed (a slow machine only waits longer).
const HangBound = time.Minute

// Await receives from ch, failing tb with "what did not happen" if
// nothing arrives within HangBound.
func Await[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(HangBound):
		tb.Fatalf("%s did not happen within %v", what, HangBound)
		panic("unreachable")
	}
}

// Reserving is a ReservingLimiter (httplimit's and grpclimit's) over an
// engine: a shared limiter that can hold units across a handler, as
// redisstore will. Every settle is counted in Settles; with SettleErr set,
// a settle fails with it and changes nothing. CtxDone counts the settles
// whose context was done (the adapters must settle without the request's
// cancellation).
type Reserving struct {
	E         *engine.Engine
	SettleErr error
	Settles   atomic.Int64
	CtxDone   atomic.Int64
}

// AllowN decides on the engine.
func (l *Reserving) AllowN(_ context.Context, key string, n int64) (engine.Decision, error) {
	return l.E.AllowN(key, n), nil
}

// ReserveN reserves on the engine and returns the reservation's settle.
func (l *Reserving) ReserveN(_ context.Context, key string, n int64) (engine.Decision, func(ctx context.Context, actual int64) (engine.Decision, error), error) {
	r := l.E.Reserve(key, n)
	if !r.Decision().Allowed {
		return r.Decision(), nil, nil
	}
	return r.Decision(), func(ctx context.Context, actual int64) (engine.Decision, error) {
		l.Settles.Add(1)
		if ctx.Err() != nil {
			l.CtxDone.Add(1)
		}
		if l.SettleErr != nil {
			return engine.Decision{}, l.SettleErr
		}
		if n == 0 { // nothing reserved: what was used is charged
			return l.E.Charge(key, actual)
		}
		return r.Settle(actual)
	}, nil
}
