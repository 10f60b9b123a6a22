package grpclimit

// Calls and streams in flight under concurrency: never past the limit,
// every unit back once they end.

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Streams and unary calls in flight under one limit, with handlers that
// return errors, panic or exit their goroutine: never more than Limit run
// at once, and every unit is back at the end.
func TestInFlightStreamsAndCallsNeverPassTheLimit(t *testing.T) {
	const limit = 3
	e, _ := newEngine(t, engine.Config{Limit: limit, Algorithm: engine.SlidingWindowStrict})
	i := mustInterceptorT(t, e, WithInFlight())
	u, s := i.Unary(), i.Stream()
	var running, most, served atomic.Int64
	work := func(mode int) error {
		n := running.Add(1)
		for {
			o := most.Load()
			if n <= o || most.CompareAndSwap(o, n) {
				break
			}
		}
		for range 20 {
			runtime.Gosched()
		}
		running.Add(-1)
		served.Add(1)
		switch mode {
		case 1:
			panic("handler")
		case 2:
			runtime.Goexit()
		case 3:
			return status.Error(codes.Aborted, "no")
		}
		return nil
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 200 {
				mode := (g + k) % 4
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { _ = recover() }()
					if k%2 == 0 {
						_, _ = u(serverCtx(), nil, sayInfo, func(context.Context, any) (any, error) { return nil, work(mode) })
						return
					}
					ss := &ctxStream{ctx: serverCtx()}
					_ = s(nil, ss, &grpc.StreamServerInfo{FullMethod: mChat, IsClientStream: true, IsServerStream: true},
						func(any, grpc.ServerStream) error { return work(mode) })
				}()
				<-done
			}
		}()
	}
	wg.Wait()
	if most.Load() > limit {
		t.Fatalf("%d handlers ran at once, limit %d", most.Load(), limit)
	}
	if served.Load() == 0 {
		t.Fatal("nothing served")
	}
	if got := remainingOf(e, "192.0.2.1"); got != limit {
		t.Fatalf("after every call returned: remaining %d, want %d", got, limit)
	}
}
