package grpclimit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/ringlimit/ringlimit/engine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// *Interceptor is go-grpc-middleware v2's ratelimit.Limiter.
var _ ratelimit.Limiter = (*Interceptor)(nil)

// TestGoGRPCMiddlewareAdapter: an Interceptor dropped into
// go-grpc-middleware's ratelimit interceptors limits per key, sends the
// fields, and keeps exempting health checks; that package flattens the
// denial to ResourceExhausted with the error's text, so RetryInfo does not
// survive (see Limit).
func TestGoGRPCMiddlewareAdapter(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: engine.FixedWindow})
	i := mustInterceptorT(t, e, WithPolicyName("mw", 0))
	cc, es := serve(t, grpc.UnaryInterceptor(ratelimit.UnaryServerInterceptor(i)), grpc.StreamInterceptor(ratelimit.StreamServerInterceptor(i)))
	for n, want := range []string{`"mw";r=1;t=10`, `"mw";r=0;t=10`} {
		r := say(t, cc, nil, mSay)
		if r.code != codes.OK {
			t.Fatalf("call %d: %v", n, r.code)
		}
		wantMD(t, r.header, MDRateLimit, want)
	}
	r := say(t, cc, nil, mSay)
	if r.code != codes.ResourceExhausted || r.retry != -1 {
		t.Errorf("third: %v retry %v", r.code, r.retry)
	}
	wantMD(t, r.header, MDRateLimit, `"mw";r=0;t=10`)
	if want := "/ringlimit.test.Echo/Say is rejected by grpc_ratelimit middleware, please retry later. rpc error: code = ResourceExhausted desc = grpclimit: rate limited; retry after " + (10 * time.Second).String(); r.msg != want {
		t.Errorf("message %q\nwant    %q", r.msg, want)
	}
	if es.count() != 2 {
		t.Errorf("handler ran %d times", es.count())
	}
	// A stream through the package's stream interceptor: the key is
	// spent, and the method comes from the stream's context.
	st, err := cc.NewStream(context.Background(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	err = st.RecvMsg(new(wrapperspb.StringValue))
	hdr, _ := st.Header()
	if r := resultOf(err, hdr); r.code != codes.ResourceExhausted || !strings.HasPrefix(r.msg, mChat+" is rejected") {
		t.Errorf("stream: %v %q", r.code, r.msg)
	}
	wantMD(t, hdr, MDRateLimit, `"mw";r=0;t=10`)
	if s := i.Stats(); s != (Stats{Allowed: 2, Denied: 2}) {
		t.Errorf("Stats %+v", s)
	}
}
