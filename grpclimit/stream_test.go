package grpclimit

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestStreamPerStream: a stream is charged once at its start, however
// many messages it carries; the third stream is refused before the
// handler runs, with the fields in its header and RetryInfo.
func TestStreamPerStream(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: engine.FixedWindow})
	i := mustInterceptorT(t, e)
	cc, es := serve(t, grpc.StreamInterceptor(i.Stream()))
	for s := range 2 {
		st, err := cc.NewStream(context.Background(), chatDesc, mChat)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if err := st.SendMsg(wrapperspb.String("m")); err != nil {
				t.Fatal(err)
			}
			if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				t.Fatalf("stream %d: %v", s, err)
			}
		}
		hdr, _ := st.Header()
		wantMD(t, hdr, MDRateLimit, `"default";r=`+strconv.Itoa(1-s)+`;t=10`)
		_ = st.CloseSend()
		if err := st.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
			t.Fatalf("stream %d end: %v", s, err)
		}
	}
	st, err := cc.NewStream(context.Background(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	err = st.RecvMsg(new(wrapperspb.StringValue))
	hdr, _ := st.Header()
	r := resultOf(err, hdr)
	if r.code != codes.ResourceExhausted || r.retry != 10*time.Second {
		t.Fatalf("third stream: %v retry %v, want ResourceExhausted retry 10s", r.code, r.retry)
	}
	wantMD(t, hdr, MDRateLimit, `"default";r=0;t=10`)
	if es.count() != 10 {
		t.Errorf("%d messages echoed, want 10", es.count())
	}
	if s := i.Stats(); s != (Stats{Allowed: 2, Denied: 1}) {
		t.Errorf("Stats %+v", s)
	}
}

// TestStreamPerMessage: with WithPerMessage each message is charged; on
// a stream the fourth message (Limit 3) ends it with ResourceExhausted,
// RetryInfo and the fields in the trailer; the stream's start is free.
func TestStreamPerMessage(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 3, Algorithm: engine.FixedWindow})
	i := mustInterceptorT(t, e, WithPerMessage())
	cc, es := serve(t, grpc.StreamInterceptor(i.Stream()))
	st, err := cc.NewStream(context.Background(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for n := range 4 {
		if err := st.SendMsg(wrapperspb.String("m")); err != nil {
			t.Fatal(err)
		}
		last = st.RecvMsg(new(wrapperspb.StringValue))
		if n < 3 && last != nil {
			t.Fatalf("message %d: %v", n, last)
		}
	}
	r := resultOf(last, nil)
	if r.code != codes.ResourceExhausted || r.retry != 10*time.Second {
		t.Fatalf("fourth message: %v retry %v, want ResourceExhausted retry 10s", r.code, r.retry)
	}
	wantMD(t, st.Trailer(), MDRateLimit, `"default";r=0;t=10`)
	wantMD(t, st.Trailer(), MDPolicy, `"default";q=3;w=10`)
	if es.count() != 3 {
		t.Errorf("%d messages echoed, want 3", es.count())
	}
	if s := i.Stats(); s != (Stats{Allowed: 3, Denied: 1}) {
		t.Errorf("Stats %+v", s)
	}
	// Unary calls are still charged once each.
	if r := say(t, serveUnary(t, i), nil, mSay); r.code != codes.ResourceExhausted {
		t.Errorf("a unary call on the spent key: %v", r.code)
	}
}
