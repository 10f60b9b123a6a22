package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

type outcome struct {
	code  codes.Code
	rate  string
	retry time.Duration
}

func call(t *testing.T, cc *grpc.ClientConn, method, tenant string) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant)
	}
	var hdr metadata.MD
	err := cc.Invoke(ctx, method, wrapperspb.String("ann"), new(wrapperspb.StringValue), grpc.Header(&hdr))
	st := status.Convert(err)
	o := outcome{code: st.Code(), rate: strings.Join(hdr.Get("ratelimit"), ", "), retry: -1}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			o.retry = ri.GetRetryDelay().AsDuration()
		}
	}
	return o
}

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

func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-limit", "0"}, "-limit 0: want 1 …"},
		{[]string{"-window", "-1s"}, "-window -1s: want > 0"},
		{[]string{"-report-cost", "9"}, "-report-cost 9: want 0 … -limit (5)"},
		{[]string{"-addr", "nowhere"}, `-addr "nowhere": want host:port`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-nope"}, "flag provided but not defined"},
	} {
		var buf bytes.Buffer
		if code := run(context.Background(), c.args, &buf); code != exitUsage || !strings.Contains(buf.String(), c.want) || !strings.Contains(buf.String(), "Usage of grpcserver") {
			t.Errorf("%v: exit %d\n%s", c.args, code, buf.String())
		}
	}
}

// syncBuffer is a bytes.Buffer that run's logger and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunServesUntilCancelled: run listens on both ports, logs them once
// they are open, serves calls and metrics, and exits 0 when cancelled.
func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-metrics", "127.0.0.1:0"}, &out) }()
	re := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+) .* metrics on (http://\S+)`)
	var m []string
	for deadline := time.Now().Add(10 * time.Second); m == nil; {
		if m = re.FindStringSubmatch(out.String()); m == nil {
			if time.Now().After(deadline) {
				t.Fatalf("no listening line:\n%s", out.String())
			}
			time.Sleep(5 * time.Millisecond) // polling the log for the ports run chose
		}
	}
	if o := call(t, dial(t, m[1]), methodHello, "t"); o.code != codes.OK {
		t.Errorf("call: %+v", o)
	}
	resp, err := http.Get(m[2])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(body), `ringlimit_grpc_decisions_total{outcome="allowed"} 1`) {
		t.Errorf("metrics:\n%s", body)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d\n%s", code, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return")
	}
}
