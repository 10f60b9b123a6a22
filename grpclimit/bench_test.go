package grpclimit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/ringlimit/ringlimit/engine"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// xrate is go-grpc-middleware's documented way to limit: a
// ratelimit.Limiter over one golang.org/x/time/rate bucket for the whole
// server (it has no keys).
type xrate struct{ l *rate.Limiter }

var errXRate = errors.New("rate limit exceeded")

func (x xrate) Limit(context.Context) error {
	if !x.l.Allow() {
		return errXRate
	}
	return nil
}

// benchImpls are the interceptors compared: none (a bare call),
// go-grpc-middleware's ratelimit over x/time/rate, and ringlimit keyed by
// peer IP with and without the rate-limit metadata. No limiter ever
// refuses: the figures are the admitted path's overhead.
func benchImpls(b *testing.B) []struct {
	name string
	ic   grpc.UnaryServerInterceptor
} {
	e, err := engine.New(engine.Config{Limit: engine.MaxLimit, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	return []struct {
		name string
		ic   grpc.UnaryServerInterceptor
	}{
		{"bare", nil},
		{"xrate", ratelimit.UnaryServerInterceptor(xrate{rate.NewLimiter(rate.Limit(1e12), 1e9)})},
		{"ringlimit", mustInterceptorT(b, e).Unary()},
		{"ringlimit-noheaders", mustInterceptorT(b, e, WithHeaders(0)).Unary()},
	}
}

// BenchmarkUnary measures the cost of each interceptor per unary call, in
// one run, two ways:
//
//   - mode=inproc: the interceptor called as the server calls it, with a
//     context holding the peer and a header sink, around a handler that
//     returns at once: the interceptor's own cost, serial and (par)
//     from every core;
//   - mode=loopback: a real call over a loopback TCP connection, to set
//     that cost against a whole round trip.
//
// Compare with benchstat -col /impl (see README).
func BenchmarkUnary(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: mSay}
	reply := wrapperspb.String("ok")
	handler := func(context.Context, any) (any, error) { return reply, nil }
	addr := net.TCPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.10:4711"))
	for _, impl := range benchImpls(b) {
		// call is one call as the server makes it, on a new call's stream.
		call := func(ctx context.Context, s *stubStream, req any) error {
			s.header = nil
			if impl.ic == nil {
				_, err := handler(ctx, req)
				return err
			}
			_, err := impl.ic(ctx, req, info, handler)
			return err
		}
		b.Run("mode=inproc/impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			s := &stubStream{}
			ctx := grpc.NewContextWithServerTransportStream(peer.NewContext(context.Background(), &peer.Peer{Addr: addr}), s)
			req := wrapperspb.String("x")
			for b.Loop() {
				if err := call(ctx, s, req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("mode=inproc-par/impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				s := &stubStream{}
				ctx := grpc.NewContextWithServerTransportStream(peer.NewContext(context.Background(), &peer.Peer{Addr: addr}), s)
				req := wrapperspb.String("x")
				for pb.Next() {
					if err := call(ctx, s, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("mode=loopback/impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			var opts []grpc.ServerOption
			if impl.ic != nil {
				opts = append(opts, grpc.UnaryInterceptor(impl.ic))
			}
			cc, _ := serve(b, opts...)
			ctx := context.Background()
			in, out := wrapperspb.String("x"), new(wrapperspb.StringValue)
			for b.Loop() {
				if err := cc.Invoke(ctx, mSay, in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
