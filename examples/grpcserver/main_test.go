package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang bound
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
	for deadline := time.Now().Add(time.Minute); m == nil; { // a hang bound
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
	case <-time.After(time.Minute): // a hang bound
		t.Fatal("run did not return")
	}
}
