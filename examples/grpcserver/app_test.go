package main

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// TestApp: the example's server on a loopback port, at a fixed instant:
// 5 calls per 10 s per tenant, Report costs 3, health and reflection
// exempt, and the metrics count what happened.
func TestApp(t *testing.T) {
	a, err := newApp(limits{Limit: 5, Window: 10 * time.Second, ReportCost: 3}, engine.NewManualClock(time.Unix(1_700_000_000, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.grpc.Serve(ln) }()
	defer a.grpc.Stop()
	cc := dial(t, ln.Addr().String())

	for n := range 5 {
		if o := call(t, cc, methodHello, "acme"); o.code != codes.OK || o.rate != `"per-tenant";r=`+string(rune('4'-n))+`;t=11` {
			t.Fatalf("acme call %d: %+v", n, o)
		}
	}
	if o := call(t, cc, methodHello, "acme"); o.code != codes.ResourceExhausted || o.retry != 10200*time.Millisecond || o.rate != `"per-tenant";r=0;t=11` {
		t.Errorf("acme's sixth call: %+v", o)
	}
	// Another tenant has its own window; Report costs 3.
	if o := call(t, cc, methodReport, "bob"); o.code != codes.OK || o.rate != `"per-tenant";r=2;t=11` {
		t.Errorf("bob's Report: %+v", o)
	}
	if o := call(t, cc, methodReport, "bob"); o.code != codes.ResourceExhausted {
		t.Errorf("bob's second Report: %+v", o)
	}
	// No tenant: keyed by the peer's IP.
	if o := call(t, cc, methodHello, ""); o.code != codes.OK || o.rate != `"per-tenant";r=4;t=11` {
		t.Errorf("no tenant: %+v", o)
	}
	if got := a.engine.AllowN("127.0.0.1", 0); got.Remaining != 4 {
		t.Errorf("the IP key: %+v", got)
	}
	// Health and reflection are exempt.
	for range 10 {
		if _, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), service) {
		t.Errorf("reflection lists %v", names)
	}
	_ = st.CloseSend()

	w := httptest.NewRecorder()
	a.metrics.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`ringlimit_grpc_decisions_total{outcome="allowed"} 7`,
		`ringlimit_grpc_decisions_total{outcome="denied"} 2`,
		"ringlimit_keys 3",
	} {
		if !strings.Contains(w.Body.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, w.Body)
		}
	}
}
