package main

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/redisstore"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

const mTalk = "/ringlimit.test.Chat/Talk"

var talkDesc = &grpc.StreamDesc{StreamName: "Talk", ServerStreams: true, ClientStreams: true}

// chatService is one bidirectional stream that echoes each message until
// the client closes its side.
var chatService = &grpc.ServiceDesc{
	ServiceName: "ringlimit.test.Chat",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Talk", ServerStreams: true, ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
		for {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if err := ss.SendMsg(in); err != nil {
				return err
			}
		}
	}}},
}

// grpclimit over Redis, unchanged: with WithInFlight a stream holds its
// unit in Redis until it ends: a second stream is refused at its start
// while the first is open and admitted once it has ended, and a stream
// whose client cancels gives its unit back; a unary call holds its unit
// while its handler runs.
func TestInFlightStreamsOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Minute, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer rdb.Close()
	rl, err := redisstore.New(rdb, engine.Config{Limit: 1, Window: time.Minute, SubWindows: 12, Algorithm: engine.SlidingWindowStrict})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	li, err := grpclimit.NewInterceptor(rl, grpclimit.WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{}, 8)
	outer := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		defer func() { ended <- struct{}{} }() // after ringlimit's interceptor has returned
		return h(srv, ss)
	}
	s := grpc.NewServer(grpc.ChainStreamInterceptor(outer, li.Stream()), grpc.UnaryInterceptor(li.Unary()))
	s.RegisterService(chatService, struct{}{})
	started, release := make(chan struct{}, 1), make(chan struct{})
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "ringlimit.test.Slow",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Wait", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/ringlimit.test.Slow/Wait"}, func(context.Context, any) (any, error) {
				started <- struct{}{}
				<-release
				return wrapperspb.String("ok"), nil
			})
		}}},
	}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer s.Stop()
	cc := dial(t, ln.Addr().String())
	left := func() int64 {
		t.Helper()
		d, err := rl.AllowN(context.Background(), "127.0.0.1", 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	open := func(ctx context.Context) grpc.ClientStream {
		t.Helper()
		st, err := cc.NewStream(ctx, talkDesc, mTalk)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(wrapperspb.String("m")); err != nil {
			t.Fatal(err)
		}
		return st
	}
	a := open(context.Background())
	if err := a.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("the first stream: %v", err)
	}
	b := open(context.Background())
	if err := b.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second stream while the first is open: %v", err)
	}
	within(t, ended, "the refused stream")
	if err := a.SendMsg(wrapperspb.String("still open")); err != nil {
		t.Fatal(err)
	}
	if err := a.RecvMsg(new(wrapperspb.StringValue)); err != nil || left() != 0 {
		t.Fatalf("the open stream: %v, Redis remaining %d, want 0", err, left())
	}
	_ = a.CloseSend()
	if err := a.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
		t.Fatalf("the first stream's end: %v", err)
	}
	within(t, ended, "the first stream")
	if got := left(); got != 1 {
		t.Fatalf("after the stream: Redis remaining %d, want 1", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := open(ctx)
	if err := c.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("a new stream: %v", err)
	}
	cancel()
	within(t, ended, "the cancelled stream")
	if got := left(); got != 1 {
		t.Fatalf("after the client cancelled: Redis remaining %d, want 1", got)
	}
	// A unary call holds its unit while its handler runs.
	first := make(chan error, 1)
	go func() {
		first <- cc.Invoke(context.Background(), "/ringlimit.test.Slow/Wait", wrapperspb.String("x"), new(wrapperspb.StringValue))
	}()
	within(t, started, "the slow call")
	if st := open(context.Background()); status.Code(st.RecvMsg(new(wrapperspb.StringValue))) != codes.ResourceExhausted {
		t.Fatal("a stream beside a unary call in flight was not refused")
	}
	within(t, ended, "the refused stream")
	close(release)
	if err := within(t, first, "the slow call's end"); err != nil {
		t.Fatal(err)
	}
	if got := left(); got != 1 {
		t.Fatalf("after the unary call: Redis remaining %d, want 1", got)
	}
	if st := li.Stats(); st.SettleErrors != 0 || st.Errors != 0 {
		t.Fatalf("Stats %+v", st)
	}
}

func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// While Redis is down, FallbackLocal's admissions hold their unit in the
// local engine and the interceptor gives it back there when the call
// ends: calls one after another keep being admitted under a limit of 1 in
// flight, and one beside a call in flight is refused locally (Unavailable,
// as every refusal of a failure policy).
func TestInFlightFallbackLocalOverDeadRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	defer rdb.Close()
	rl, err := redisstore.New(rdb, engine.Config{Limit: 1, Window: time.Minute, SubWindows: 12, Algorithm: engine.SlidingWindowStrict},
		redisstore.WithFallbackLocal(1))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	li, err := grpclimit.NewInterceptor(rl, grpclimit.WithInFlight())
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}, 1), make(chan struct{})
	s := grpc.NewServer(grpc.UnaryInterceptor(li.Unary()))
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "ringlimit.test.Slow",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Wait", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/ringlimit.test.Slow/Wait"}, func(context.Context, any) (any, error) {
				if in.GetValue() == "slow" {
					started <- struct{}{}
					<-release
				}
				return wrapperspb.String("ok"), nil
			})
		}}},
	}, struct{}{})
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(sl) }()
	defer s.Stop()
	cc := dial(t, sl.Addr().String())
	invoke := func(v string) error {
		return cc.Invoke(context.Background(), "/ringlimit.test.Slow/Wait", wrapperspb.String(v), new(wrapperspb.StringValue))
	}
	for i := range 4 {
		if err := invoke("fast"); err != nil {
			t.Fatalf("call %d one after another: %v (each gives its unit back locally)", i, err)
		}
	}
	first := make(chan error, 1)
	go func() { first <- invoke("slow") }()
	within(t, started, "the slow call")
	if err := invoke("fast"); status.Code(err) != codes.Unavailable {
		t.Fatalf("a call beside one in flight: %v, want the failure policy's refusal (Unavailable: the local engine refused it)", err)
	}
	close(release)
	if err := within(t, first, "the slow call's end"); err != nil {
		t.Fatal(err)
	}
	if err := invoke("fast"); err != nil {
		t.Fatalf("after the slow call: %v", err)
	}
	if st := li.Stats(); st.SettleErrors != 0 || st.Errors == 0 {
		t.Fatalf("Stats %+v: want the policy answers counted as Errors, no settle errors", st)
	}
}
