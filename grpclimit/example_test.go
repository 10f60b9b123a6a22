package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A server limiting every client IP to 2 calls per 10 s, called over a
// real loopback connection. The health service stands in for your own:
// it is exempt by default, so WithoutDefaultExempt makes it count here.
func ExampleNewInterceptor() {
	e, err := engine.New(engine.Config{
		Limit: 2, Window: 10 * time.Second, Algorithm: engine.FixedWindow,
		Clock: engine.NewManualClock(time.Unix(1_700_000_000, 0)), // a fixed instant, for the output below
	})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	limit, err := grpclimit.NewInterceptor(e, grpclimit.WithPolicyName("per-ip", 0), grpclimit.WithoutDefaultExempt())
	if err != nil {
		panic(err) // a bad option, named with its allowed range
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(limit.Unary()), grpc.StreamInterceptor(limit.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	for range 3 {
		var md metadata.MD
		_, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		st := status.Convert(err)
		fmt.Println(st.Code(), md.Get("ratelimit-policy"), md.Get("ratelimit"))
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("retry after", ri.GetRetryDelay().AsDuration())
			}
		}
	}
	fmt.Printf("%+v\n", limit.Stats())
	// Output:
	// OK ["per-ip";q=2;w=10] ["per-ip";r=1;t=10]
	// OK ["per-ip";q=2;w=10] ["per-ip";r=0;t=10]
	// ResourceExhausted ["per-ip";q=2;w=10] ["per-ip";r=0;t=10]
	// retry after 10s
	// {Allowed:2 Denied:1 Rejected:0 Errors:0 Canceled:0 WouldDeny:0 SettleErrors:0}
}

// A misconfiguration is an error at construction, naming what is wrong.
func ExampleNewInterceptor_misconfigured() {
	e, err := engine.New(engine.Config{Limit: 2, Window: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	_, err = grpclimit.NewInterceptor(e,
		grpclimit.WithKey(grpclimit.KeyByMetadata("grpc-tenant", grpclimit.MissingReject)),
		grpclimit.WithMethodCost("/shop.Cart/Checkout", 5))
	fmt.Println(err)
	// Output:
	// grpclimit: WithKey: KeyByMetadata name = "grpc-tenant": grpc- keys are reserved by gRPC
	// grpclimit: WithMethodCost("/shop.Cart/Checkout", 5): above the limiter's Limit 2, so no call could ever fit
}

// An egress limit towards a third-party API: at most 100 calls per second
// leave this process on the connection, each waiting its turn within its
// deadline.
func ExampleUnaryClientInterceptor() {
	e, err := engine.New(engine.Config{Limit: 100, Window: time.Second})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	cc, err := grpc.NewClient("api.example.com:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()), // use TLS credentials for a real API
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(e, grpclimit.WithMaxWait(2*time.Second))))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	fmt.Println(cc.Target())
	// Output: api.example.com:443
}
