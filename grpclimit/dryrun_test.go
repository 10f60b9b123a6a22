package grpclimit

import (
	"context"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestDryRunRefusesNothing: under WithDryRun every call reaches the
// handler, over a real loopback server, unary and stream; a refusal is
// counted WouldDeny with the metadata a denial would carry; a key error
// is served too.
func TestDryRunRefusesNothing(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2})
	i := mustInterceptorT(t, e, WithDryRun(), WithPolicyName("shadow", 0))
	cc, es := serve(t, grpc.UnaryInterceptor(i.Unary()), grpc.StreamInterceptor(i.Stream()))
	for n, want := range []string{`"shadow";r=1;t=11`, `"shadow";r=0;t=11`, `"shadow";r=0;t=11`} { // t0 starts a sub-window: its units count W + w
		r := say(t, cc, nil, mSay)
		if r.code != codes.OK || r.retry != -1 {
			t.Fatalf("call %d: %v, RetryInfo %v", n, r.code, r.retry)
		}
		wantMD(t, r.header, MDRateLimit, want)
	}
	// A stream the full key would refuse opens and echoes.
	st, err := cc.NewStream(context.Background(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("the stream was refused: %v", err)
	}
	_ = st.CloseSend()
	if es.count() != 4 {
		t.Fatalf("the handlers ran %d times for 3 calls and a message", es.count())
	}
	if s := i.Stats(); s != (Stats{Allowed: 2, WouldDeny: 2}) {
		t.Fatalf("Stats %+v", s)
	}
	keyed := mustInterceptorT(t, e, WithDryRun(), WithKey(KeyByMetadata("x-tenant", MissingReject)))
	h := func(context.Context, any) (any, error) { return "ran", nil }
	if out, err := keyed.Unary()(callCtx(tcp("192.0.2.1:4711")), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h); err != nil || out != "ran" || keyed.Stats() != (Stats{Rejected: 1}) {
		t.Fatalf("a key error under WithDryRun: %v %v %+v", out, err, keyed.Stats())
	}
}

// TestDryRunMulti: NewMultiInterceptor with WithDryRun lets a refusal
// through, charging none of the engines for it.
func TestDryRunMulti(t *testing.T) {
	a, _ := newEngine(t, engine.Config{Limit: 5})
	b, _ := newEngine(t, engine.Config{Limit: 1})
	i, err := NewMultiInterceptor([]Policy{{Name: "a", Limiter: a, Key: KeyByMethod()}, {Name: "b", Limiter: b, Key: KeyByMethod()}}, WithDryRun())
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, any) (any, error) { return nil, nil }
	for range 2 {
		if _, err := i.Unary()(callCtx(tcp("192.0.2.1:4711")), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.AllowN(mSay, 0).Remaining; got != 4 || i.Stats() != (Stats{Allowed: 1, WouldDeny: 1}) {
		t.Fatalf("a's remaining %d, Stats %+v", got, i.Stats())
	}
}

// TestDryRunStillRefusesAGoneCaller: WithDryRun does not turn a caller
// who left into a handler run.
func TestDryRunStillRefusesAGoneCaller(t *testing.T) {
	i := mustInterceptorT(t, &adaptertest.FailOpenOnCancel{}, WithDryRun(), WithKey(KeyByMethod()))
	runs := 0
	h := func(context.Context, any) (any, error) { runs++; return nil, nil }
	for _, c := range adaptertest.DoneContexts() {
		if _, err := i.Unary()(c.Ctx, nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h); status.Code(err) != status.FromContextError(c.Err).Code() {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
	if runs != 0 || i.Stats() != (Stats{Canceled: uint64(len(adaptertest.DoneContexts()))}) {
		t.Fatalf("runs %d, Stats %+v", runs, i.Stats())
	}
}
