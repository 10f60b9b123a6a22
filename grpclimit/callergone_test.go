package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCallerGoneEndsWithContextStatus: a fail-open Decision that comes
// with an error once the call's context is done runs no handler; the call
// ends with the context's status, counted Canceled. Before, the failure
// policy's admission ran the handler uncounted.
func TestCallerGoneEndsWithContextStatus(t *testing.T) {
	for _, tc := range adaptertest.DoneContexts() {
		t.Run(tc.Name, func(t *testing.T) {
			i := mustInterceptorT(t, &adaptertest.FailOpenOnCancel{}, WithKey(KeyByMethod()))
			runs := 0
			h := func(context.Context, any) (any, error) { runs++; return nil, nil }
			want := status.FromContextError(tc.Err).Code()
			_, err := i.Unary()(tc.Ctx, nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h)
			if runs != 0 || status.Code(err) != want {
				t.Fatalf("handler runs %d, status %v; want 0 and %v", runs, status.Code(err), want)
			}
			if s := i.Stats(); s != (Stats{Canceled: 1}) {
				t.Fatalf("Stats %+v, want Canceled 1", s)
			}
		})
	}
}

// TestCallerGoneOverLoopback: real gRPC clients with 20 ms deadlines, over
// a loopback listener, in front of a fail-open limiter that holds each
// call until its deadline has passed: no handler runs, and every call that
// reached the server is counted Canceled. A call whose deadline passes
// before it is sent never reaches the server, as on a loaded machine; so
// the test counts arrivals and calls until 20 have arrived, and the
// verdict does not depend on speed. (Waiting for the server to finish
// every call hung under -race -count=5 beside two CPU hogs.)
func TestCallerGoneOverLoopback(t *testing.T) {
	const calls = 20
	const maxAttempts = 100 * calls // a hang bound, not a verdict
	i := mustInterceptorT(t, &adaptertest.FailOpenOnCancel{Block: true})
	var arrived atomic.Uint64 // calls of mSay that reached the interceptor
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == mSay {
			arrived.Add(1)
		}
		return h(ctx, req)
	}
	cc, es, srv := serveServer(t, grpc.ChainUnaryInterceptor(outer, i.Unary()))
	// Connect first (the health service is exempt), so that the short
	// deadlines are spent on the server more often than on dialling.
	if r := say(t, cc, nil, "/grpc.health.v1.Health/Check"); r.code == codes.Unavailable {
		t.Fatalf("warm-up: %v %s", r.code, r.msg)
	}
	for n := 0; arrived.Load() < calls; n++ {
		if n == maxAttempts {
			t.Fatalf("%d of %d calls reached the server", arrived.Load(), n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		r := say(t, cc, ctx, mSay)
		cancel()
		if r.code != codes.DeadlineExceeded {
			t.Errorf("client saw %v, want DeadlineExceeded", r.code)
		}
	}
	srv.GracefulStop() // every call that reached the server has finished
	n := arrived.Load()
	if runs := es.count(); runs != 0 {
		t.Errorf("handler ran %d times for %d calls past their deadline", runs, n)
	}
	if s := i.Stats(); s != (Stats{Canceled: n}) {
		t.Errorf("Stats %+v, want Canceled %d", s, n)
	}
}

// TestClientCallerGone: the client interceptor sends no call when a
// fail-open limiter fails after the call's context ended, or its deadline
// passed before its timer fired.
func TestClientCallerGone(t *testing.T) {
	for _, tc := range adaptertest.DoneContexts() {
		c, err := NewClient(&adaptertest.FailOpenOnCancel{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(tc.Ctx, "api", 1); status.Code(err) != status.FromContextError(tc.Err).Code() {
			t.Errorf("%s: Wait = %v, want %v", tc.Name, err, status.FromContextError(tc.Err).Code())
		}
		if s := c.Stats(); s != (ClientStats{Canceled: 1}) {
			t.Errorf("%s: Stats %+v", tc.Name, s)
		}
	}
}

// TestDeadlinePassedIsCallerGoneNotAnError: a call whose deadline has
// passed, on a timer that has not fired (ctx.Err() still nil), is answered
// by redisstore as a caller who has gone: nothing admitted, an error
// wrapping context.DeadlineExceeded. The interceptor judges it the same
// way: DeadlineExceeded, counted Canceled. Before, it checked ctx.Err()
// alone and answered Unavailable "rate limiter unavailable", counted
// Errors: 15–17% of the calls whose caller had gone in a storm with
// 0.3–1.5 ms deadlines beside two CPU hogs (examples/grpcserver's
// TestShortDeadlinesBuyNoAdmissions).
func TestDeadlinePassedIsCallerGoneNotAnError(t *testing.T) {
	asRedis := adaptertest.LimiterFunc(func(ctx context.Context, _ string, _ int64) (engine.Decision, error) {
		if err := ctx.Err(); err != nil {
			return engine.Decision{}, err
		}
		return engine.Decision{Limit: 5}, fmt.Errorf("redisstore: nothing admitted, the caller's context ended before Redis answered: %w", context.DeadlineExceeded)
	})
	runs := 0
	h := func(context.Context, any) (any, error) { runs++; return nil, nil }
	single := mustInterceptorT(t, asRedis, WithKey(KeyByMethod()))
	multi, err := NewMultiInterceptor([]Policy{{Name: "a", Limiter: asRedis, Key: KeyByMethod()}})
	if err != nil {
		t.Fatal(err)
	}
	for name, i := range map[string]*Interceptor{"NewInterceptor": single, "NewMultiInterceptor": multi} {
		_, err := i.Unary()(adaptertest.LateTimer(context.Background()), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h)
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s: %v, want DeadlineExceeded", name, err)
		}
		if s := i.Stats(); s != (Stats{Canceled: 1}) {
			t.Errorf("%s: Stats %+v, want Canceled 1", name, s)
		}
	}
	if runs != 0 {
		t.Errorf("the handler ran %d times", runs)
	}
}

// TestCancelledCallCancelsTheLimiter: a client that gives up while a slow backend decides
// cancels the context the backend sees; the failed decision runs no
// handler and is counted Canceled.
func TestCancelledCallCancelsTheLimiter(t *testing.T) {
	entered := make(chan struct{})
	seen := make(chan error, 1)
	block := adaptertest.LimiterFunc(func(ctx context.Context, key string, n int64) (engine.Decision, error) {
		close(entered)
		<-ctx.Done()
		seen <- ctx.Err()
		return engine.Decision{Limit: 1, RetryAfter: time.Second}, ctx.Err()
	})
	i := mustInterceptorT(t, block)
	served := make(chan struct{}) // closed when the interceptor has returned
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		defer close(served)
		return h(ctx, req)
	}
	cc, _ := serve(t, grpc.ChainUnaryInterceptor(outer, i.Unary()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- say(t, cc, ctx, mSay) }()
	adaptertest.Await(t, entered, "the limiter's call")
	cancel()
	if r := adaptertest.Await(t, done, "the call's end"); r.code != codes.Canceled {
		t.Errorf("client saw %v, want Canceled", r.code)
	}
	if err := adaptertest.Await(t, seen, "the limiter's context's end"); !errors.Is(err, context.Canceled) {
		t.Errorf("the limiter's context ended with %v", err)
	}
	adaptertest.Await(t, served, "the server's finishing the call") // after the client left
	if s := i.Stats(); s != (Stats{Canceled: 1}) {
		t.Errorf("Stats %+v", s)
	}
}
