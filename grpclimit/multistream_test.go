package grpclimit

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// chat opens a stream, sends msgs messages and reads each echo; it
// returns the first error (a refusal at the start shows on the first
// read).
func chat(t *testing.T, cc *grpc.ClientConn, msgs int) (grpc.ClientStream, error) {
	t.Helper()
	st, err := cc.NewStream(context.Background(), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	for range msgs {
		if err := st.SendMsg(wrapperspb.String("m")); err != nil {
			return st, st.RecvMsg(new(wrapperspb.StringValue))
		}
		if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return st, err
		}
	}
	_ = st.CloseSend()
	if err := st.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
		return st, err
	}
	return st, nil
}

// TestMultiStreamPerStream: NewMultiInterceptor on streams charges every
// policy once per stream; the policy with the smaller limit refuses the
// third stream before the handler runs, leaving the other uncharged, with
// both policies' fields in the header.
func TestMultiStreamPerStream(t *testing.T) {
	wide, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow})
	narrow, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: engine.FixedWindow})
	i, err := NewMultiInterceptor([]Policy{{Name: "wide", Limiter: wide}, {Name: "narrow", Limiter: narrow, Key: KeyByMethod()}})
	if err != nil {
		t.Fatal(err)
	}
	cc, es := serve(t, grpc.StreamInterceptor(i.Stream()))
	for s := range 2 {
		if _, err := chat(t, cc, 3); err != nil {
			t.Fatalf("stream %d: %v", s, err)
		}
	}
	st, err := chat(t, cc, 1)
	hdr, _ := st.Header()
	if r := resultOf(err, hdr); r.code != codes.ResourceExhausted || r.retry != 10*time.Second {
		t.Fatalf("third stream: %v retry %v, want ResourceExhausted retry 10s", r.code, r.retry)
	}
	if msg := adaptertest.CheckMembers(hdr.Get(MDPolicy), hdr.Get(MDRateLimit), []string{"wide", "narrow"}, []int64{5, 2}, []int64{3, 0}); msg != "" {
		t.Error(msg)
	}
	if got := wide.AllowN("127.0.0.1", 0).Remaining; got != 3 {
		t.Errorf("the refused stream charged the wide policy: remaining %d, want 3", got)
	}
	if es.count() != 6 {
		t.Errorf("%d messages echoed, want 6", es.count())
	}
	if s := i.Stats(); s != (Stats{Allowed: 2, Denied: 1}) {
		t.Errorf("Stats %+v", s)
	}
}

// TestMultiStreamPerMessage: with WithPerMessage every message is charged
// under every policy; the third message ends the stream with the fields
// in the trailer.
func TestMultiStreamPerMessage(t *testing.T) {
	wide, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow})
	narrow, _ := newEngine(t, engine.Config{Limit: 2, Algorithm: engine.FixedWindow})
	i, err := NewMultiInterceptor([]Policy{{Name: "wide", Limiter: wide}, {Name: "narrow", Limiter: narrow}}, WithPerMessage())
	if err != nil {
		t.Fatal(err)
	}
	cc, es := serve(t, grpc.StreamInterceptor(i.Stream()))
	st, err := chat(t, cc, 3)
	if r := resultOf(err, nil); r.code != codes.ResourceExhausted {
		t.Fatalf("third message: %v, want ResourceExhausted", r.code)
	}
	wantMD(t, st.Trailer(), MDRateLimit, `"wide";r=3;t=10`, `"narrow";r=0;t=10`)
	if es.count() != 2 {
		t.Errorf("%d messages echoed, want 2", es.count())
	}
	if s := i.Stats(); s != (Stats{Allowed: 2, Denied: 1}) {
		t.Errorf("Stats %+v", s)
	}
}

// TestStreamServerInterceptorAndDryRunOnStreams: the package-level
// constructor serves streams as Interceptor.Stream does; under WithDryRun
// a multi-policy stream whose key cannot be computed, or that a policy
// refuses, still runs.
func TestStreamServerInterceptorAndDryRunOnStreams(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	cc, _ := serve(t, grpc.StreamInterceptor(StreamServerInterceptor(e)))
	if _, err := chat(t, cc, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := chat(t, cc, 1); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("StreamServerInterceptor(nil) did not panic")
		}
	}()
	StreamServerInterceptor(nil)
}

func TestMultiDryRunStreams(t *testing.T) {
	a, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	b, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.FixedWindow})
	i, err := NewMultiInterceptor([]Policy{{Name: "a", Limiter: a}, {Name: "tenant", Limiter: b, Key: KeyByMetadata("x-tenant", MissingReject)}}, WithDryRun())
	if err != nil {
		t.Fatal(err)
	}
	cc, es := serve(t, grpc.StreamInterceptor(i.Stream()))
	if _, err := chat(t, cc, 2); err != nil { // no x-tenant: a key error, let through
		t.Fatalf("dry run refused a stream: %v", err)
	}
	if es.count() != 2 || i.Stats() != (Stats{Rejected: 1}) {
		t.Errorf("echoed %d, Stats %+v; want 2, one Rejected", es.count(), i.Stats())
	}
}

// TestMultiOverFailingLimiters: a shared limiter that fails follows its
// failure policy under NewMultiInterceptor: a fail-open admission goes on
// (an Error, the call runs), a fail-closed refusal is Unavailable with its
// RetryInfo (under WithDryRun an Error, and the call runs); a caller whose
// context ended gets its context's status, counted as Canceled.
func TestMultiOverFailingLimiters(t *testing.T) {
	down := errors.New("redis down")
	open := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		return engine.Decision{Allowed: true, Limit: 3, Remaining: 3}, down
	})
	closed := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		return engine.Decision{Limit: 3, RetryAfter: 2 * time.Second}, down
	})
	h := func(context.Context, any) (any, error) { return "ran", nil }
	info := &grpc.UnaryServerInfo{FullMethod: mSay}
	gone, cancel := context.WithCancel(callCtx(tcp("192.0.2.1:4711")))
	cancel()
	for _, c := range []struct {
		name    string
		l       any
		opts    []Option
		ctx     context.Context
		code    codes.Code
		retry   time.Duration
		ran     bool
		stats   Stats
		without bool // no fields expected
	}{
		{"fail open", open, nil, nil, codes.OK, -1, true, Stats{Errors: 1}, false},
		{"fail closed", closed, nil, nil, codes.Unavailable, 2 * time.Second, false, Stats{Errors: 1}, false},
		{"fail closed, dry run", closed, []Option{WithDryRun()}, nil, codes.OK, -1, true, Stats{Errors: 1}, false},
		{"caller gone", closed, nil, gone, codes.Canceled, -1, false, Stats{Canceled: 1}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newEngine(t, engine.Config{Limit: 5})
			i, err := NewMultiInterceptor([]Policy{{Name: "local", Limiter: e}, {Name: "shared", Limiter: c.l}}, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := c.ctx
			if ctx == nil {
				ctx = callCtx(tcp("192.0.2.1:4711"))
			}
			out, err := i.Unary()(ctx, nil, info, h)
			r := resultOf(err, nil)
			if r.code != c.code || r.retry != c.retry || (out == "ran") != c.ran {
				t.Errorf("%v retry %v ran %v; want %v retry %v ran %v", r.code, r.retry, out == "ran", c.code, c.retry, c.ran)
			}
			if s := i.Stats(); s != c.stats {
				t.Errorf("Stats %+v, want %+v", s, c.stats)
			}
		})
	}
}

// TestDryRunCountsEveryRefusal: under WithDryRun a cost above the limit
// and a full MaxKeys table are would-denies, and a limit the engine
// rejected is Rejected; every call runs.
func TestDryRunCountsEveryRefusal(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 2, MaxKeys: 1})
	h := func(context.Context, any) (any, error) { return "ran", nil }
	costly := mustInterceptorT(t, e, WithDryRun(), WithCost(func(context.Context, string) int64 { return 3 }))
	if out, err := costly.Unary()(callCtx(tcp("192.0.2.1:4711")), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h); err != nil || out != "ran" {
		t.Fatalf("cost above the limit: %v %v", out, err)
	}
	full := mustInterceptorT(t, e, WithDryRun())
	for _, ip := range []string{"192.0.2.1:1", "192.0.2.2:1"} { // the second is a new key beyond MaxKeys
		if out, err := full.Unary()(callCtx(tcp(ip)), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h); err != nil || out != "ran" {
			t.Fatalf("%s: %v %v", ip, out, err)
		}
	}
	bad := adaptertest.LimiterFunc(func(context.Context, string, int64) (engine.Decision, error) {
		return engine.Decision{Limit: 5, RetryAfter: engine.Never}, nil // not a refusal: a limit it could not use
	})
	mis := mustInterceptorT(t, bad, WithDryRun(), WithPolicyName("p", time.Second))
	if out, err := mis.Unary()(callCtx(tcp("192.0.2.1:4711")), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h); err != nil || out != "ran" {
		t.Fatalf("misconfigured: %v %v", out, err)
	}
	if costly.Stats() != (Stats{WouldDeny: 1}) || full.Stats() != (Stats{Allowed: 1, WouldDeny: 1}) || mis.Stats() != (Stats{Rejected: 1}) {
		t.Errorf("Stats: cost %+v, full %+v, misconfigured %+v", costly.Stats(), full.Stats(), mis.Stats())
	}
	// Without the dry run, the misconfigured decision is Internal.
	strict := mustInterceptorT(t, bad, WithPolicyName("p", time.Second))
	if _, err := strict.Unary()(callCtx(tcp("192.0.2.1:4711")), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h); status.Code(err) != codes.Internal {
		t.Errorf("misconfigured: %v, want Internal", err)
	}
}

// TestStreamClientInterceptorWaitsBeforeOpening: the package-level client
// constructor charges a stream once, before it is opened, keyed by the
// connection's target; a refusal leaves the stream unopened.
func TestStreamClientInterceptorWaitsBeforeOpening(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 1})
	opened := 0
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		opened++
		return nil, nil
	}
	si := StreamClientInterceptor(e, WithMaxWait(time.Millisecond))
	cc, err := grpc.NewClient("passthrough:///api.example", grpc.WithTransportCredentials(insecure.NewCredentials())) // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := si(context.Background(), chatDesc, cc, mChat, streamer); err != nil || opened != 1 {
		t.Fatalf("first stream: %v, opened %d", err, opened)
	}
	if _, err := si(context.Background(), chatDesc, cc, mChat, streamer); status.Code(err) != codes.ResourceExhausted || opened != 1 {
		t.Fatalf("second stream: %v, opened %d; want ResourceExhausted, unopened", err, opened)
	}
	if got := e.AllowN(cc.Target(), 0).Remaining; got != 0 {
		t.Errorf("the stream is keyed %q: its remaining is %d, want 0", cc.Target(), got)
	}
	// No connection, no target: an empty key, refused.
	if _, err := si(context.Background(), chatDesc, nil, mChat, streamer); status.Code(err) != codes.InvalidArgument || opened != 1 {
		t.Fatalf("a stream with no connection: %v, opened %d; want InvalidArgument, unopened", err, opened)
	}
	// A new key beyond MaxKeys is refused at once, not waited for.
	full, _ := newEngine(t, engine.Config{Limit: 1, MaxKeys: 1})
	keys := []string{"a", "b"}
	c, err := NewClient(full, WithClientKey(func(context.Context, *grpc.ClientConn, string) string {
		k := keys[0]
		keys = keys[1:]
		return k
	}))
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		if _, err := c.Stream()(context.Background(), chatDesc, nil, mChat, streamer); status.Code(err) != want {
			t.Errorf("key %d: %v, want %v", n, err, want)
		}
	}
	if s := c.Stats(); s.Admitted != 1 || s.Refused != 1 {
		t.Errorf("Stats %+v, want one admitted, one refused", s)
	}
	if _, err := NewClient(e, WithClientCost(mSay, 1), WithClientCost(mSay, 1)); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("WithClientCost twice: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("StreamClientInterceptor(nil) did not panic")
		}
	}()
	StreamClientInterceptor(nil)
}

// sharedReserver is a ReservingLimiter over an engine that counts each
// reservation's settles.
type sharedReserver struct {
	e       *engine.Engine
	mu      sync.Mutex
	settles []int
	last    []int64
}

func (l *sharedReserver) AllowN(_ context.Context, key string, n int64) (engine.Decision, error) {
	return l.e.AllowN(key, n), nil
}

func (l *sharedReserver) ReserveN(_ context.Context, key string, n int64) (engine.Decision, SettleFunc, error) {
	r := l.e.Reserve(key, n)
	if !r.Decision().Allowed {
		return r.Decision(), nil, nil
	}
	l.mu.Lock()
	i := len(l.settles)
	l.settles = append(l.settles, 0)
	l.last = append(l.last, -1)
	l.mu.Unlock()
	return r.Decision(), func(_ context.Context, actual int64) (engine.Decision, error) {
		l.mu.Lock()
		l.settles[i]++
		l.last[i] = actual
		l.mu.Unlock()
		return r.Settle(actual)
	}, nil
}

// Streams under NewMultiInterceptor: a shared limiter in flight, then an
// engine in flight that refuses: the stream is refused, and the shared
// limiter's reservation is given back once ("a ReservingLimiter gives
// back what it admitted"); an admitted stream holds both until it ends,
// then gives both back, once each.
func TestMultiStreamsInFlightWithASharedLimiter(t *testing.T) {
	se, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.SlidingWindowStrict})
	shared := &sharedReserver{e: se}
	local, _ := newEngine(t, engine.Config{Limit: 1, Algorithm: engine.SlidingWindowStrict})
	i, err := NewMultiInterceptor([]Policy{
		{Name: "shared", Limiter: shared, InFlight: true},
		{Name: "local", Limiter: local, InFlight: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := i.Stream()
	info := &grpc.StreamServerInfo{FullMethod: mChat, IsClientStream: true, IsServerStream: true}
	var inner error
	err = s(nil, &ctxStream{ctx: serverCtx()}, info, func(any, grpc.ServerStream) error {
		if a, b := remainingOf(se, "192.0.2.1"), remainingOf(local, "192.0.2.1"); a != 4 || b != 0 {
			t.Errorf("while the stream runs: shared %d, local %d", a, b)
		}
		inner = s(nil, &ctxStream{ctx: serverCtx()}, info, func(any, grpc.ServerStream) error { return nil })
		return nil
	})
	if err != nil || status.Code(inner) != codes.ResourceExhausted {
		t.Fatalf("outer %v, inner %v", err, inner)
	}
	if a, b := remainingOf(se, "192.0.2.1"), remainingOf(local, "192.0.2.1"); a != 5 || b != 1 {
		t.Fatalf("after the streams: shared %d (want 5), local %d (want 1)", a, b)
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for k, n := range shared.settles {
		if n != 1 || shared.last[k] != 0 {
			t.Fatalf("shared reservation %d settled %d times, last to %d", k, n, shared.last[k])
		}
	}
}
