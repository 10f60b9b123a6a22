package grpclimit

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// t0 is the instant every test engine starts at (adaptertest.T0, aligned
// to a 10 s window, so FixedWindow waits are exact).
var t0 = adaptertest.T0

// newEngine is an engine on a ManualClock at t0: Window 10 s and Limit 2
// unless cfg says otherwise.
func newEngine(t testing.TB, cfg engine.Config) (*engine.Engine, *engine.ManualClock) {
	t.Helper()
	return adaptertest.NewEngine(t, cfg, 2)
}

func mustInterceptorT(t testing.TB, l any, opts ...Option) *Interceptor {
	t.Helper()
	i, err := NewInterceptor(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// The test service, "ringlimit.test.Echo", is written by hand as protoc
// would generate it, over well-known wrapper messages, so the tests need
// no generated code: Say is unary; Chat is a bidirectional stream that
// echoes each message.
const (
	mSay  = "/ringlimit.test.Echo/Say"
	mChat = "/ringlimit.test.Echo/Chat"
	mBig  = "/ringlimit.test.Echo/Big"
)

type echoServer struct {
	mu   sync.Mutex
	seen int // handler calls (unary) and messages echoed (streams)
}

func (s *echoServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

func (s *echoServer) inc() {
	s.mu.Lock()
	s.seen++
	s.mu.Unlock()
}

func unaryHandler(method string) func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			srv.(*echoServer).inc()
			return wrapperspb.String("hi " + req.(*wrapperspb.StringValue).GetValue()), nil
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

func chatHandler(srv any, ss grpc.ServerStream) error {
	for {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		srv.(*echoServer).inc()
		if err := ss.SendMsg(wrapperspb.String("echo " + in.GetValue())); err != nil {
			return err
		}
	}
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "ringlimit.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Say", Handler: unaryHandler(mSay)},
		{MethodName: "Big", Handler: unaryHandler(mBig)},
	},
	Streams: []grpc.StreamDesc{{StreamName: "Chat", Handler: chatHandler, ServerStreams: true, ClientStreams: true}},
}

var chatDesc = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

// serve starts a real gRPC server on a loopback TCP port with opts, with
// the echo and health services, and returns a connection to it and the
// echo server. Both are stopped when the test ends.
func serve(t testing.TB, opts ...grpc.ServerOption) (*grpc.ClientConn, *echoServer) {
	t.Helper()
	cc, es, _ := serveServer(t, opts...)
	return cc, es
}

// serveServer is serve, also returning the server, for a test that stops
// it itself (GracefulStop: every call that reached it has finished).
func serveServer(t testing.TB, opts ...grpc.ServerOption) (*grpc.ClientConn, *echoServer, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	es := &echoServer{}
	s.RegisterService(&echoDesc, es)
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc, es, s
}

// result is what a client saw of one unary call.
type result struct {
	code   codes.Code
	msg    string
	header metadata.MD
	retry  time.Duration // the RetryInfo delay; -1 without one
}

func say(t testing.TB, cc *grpc.ClientConn, ctx context.Context, method string) result {
	t.Helper()
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute) // longer than any wait a test expects
		defer cancel()
	}
	var hdr metadata.MD
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String("x"), out, grpc.Header(&hdr))
	return resultOf(err, hdr)
}

func resultOf(err error, hdr metadata.MD) result {
	st := status.Convert(err)
	r := result{code: st.Code(), msg: st.Message(), header: hdr, retry: -1}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			r.retry = ri.GetRetryDelay().AsDuration()
		}
	}
	return r
}

// wantMD checks that md[key] is exactly want (none for no want).
func wantMD(t testing.TB, md metadata.MD, key string, want ...string) {
	t.Helper()
	adaptertest.WantValues(t, "metadata "+key, md.Get(key), want...)
}

func serveUnary(t *testing.T, i *Interceptor) *grpc.ClientConn {
	cc, _ := serve(t, grpc.UnaryInterceptor(i.Unary()))
	return cc
}

// callCtx is the server context of a call from addr with incoming
// metadata md (key/value pairs).
func callCtx(addr net.Addr, md ...string) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	if len(md) > 0 {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(md...))
	}
	return ctx
}

func tcp(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// stubStream is the ServerTransportStream a server puts in a call's
// context, for grpc.SetHeader: it joins header metadata as the transport
// does.
type stubStream struct {
	mu     sync.Mutex
	header metadata.MD
}

func (s *stubStream) Method() string { return mSay }

func (s *stubStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	s.header = metadata.Join(s.header, md)
	s.mu.Unlock()
	return nil
}

func (s *stubStream) SendHeader(metadata.MD) error { return nil }

func (s *stubStream) SetTrailer(metadata.MD) error { return nil }

// newRemote is a ContextLimiter answering from next that records, per
// call, the key, the call's incoming metadata value "trace" and ctx.Err().
func newRemote(next func(key string, n int64) (engine.Decision, error)) *adaptertest.Remote {
	return &adaptertest.Remote{Next: next, Trace: func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		return append(md.Get("trace"), "")[0]
	}}
}

func remainingOf(e *engine.Engine, key string) int64 { return e.AllowN(key, 0).Remaining }

// ctxStream is a ServerStream whose context is ctx.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

func (s *ctxStream) SetHeader(metadata.MD) error { return nil }
