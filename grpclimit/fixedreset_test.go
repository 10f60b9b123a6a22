package grpclimit

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"google.golang.org/grpc"
)

// TestFixedWindowAdmittedResetIsExact: an admitted call of a FixedWindow
// limiter says t= the time to the end of its Unix-aligned window, as the
// denial that follows does, not the whole window (t=3600 before).
func TestFixedWindowAdmittedResetIsExact(t *testing.T) {
	e, clk := newEngine(t, engine.Config{Algorithm: engine.FixedWindow, Window: time.Hour, Limit: 1})
	clk.Set(t0.Truncate(time.Hour).Add(time.Hour + 657*time.Second))
	i := mustInterceptorT(t, e, WithPolicy("fixed", 0))
	s := &stubStream{}
	ctx := grpc.NewContextWithServerTransportStream(callCtx(tcp("192.0.2.1:4711")), s)
	h := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: mSay}
	if _, err := i.Unary()(ctx, nil, info, h); err != nil {
		t.Fatal(err)
	}
	wantMD(t, s.header, MDRateLimit, `"fixed";r=0;t=2943`)
	s.header = nil
	if _, err := i.Unary()(ctx, nil, info, h); err == nil {
		t.Fatal("the second call was admitted")
	}
	wantMD(t, s.header, MDRateLimit, `"fixed";r=0;t=2943`)
}
