package grpclimit

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLongMetadataValuesNeverReachTheLimiter: distinct huge key values are
// refused with InvalidArgument naming the cap; the limiter never sees one.
func TestLongMetadataValuesNeverReachTheLimiter(t *testing.T) {
	rec := &adaptertest.Recorder{}
	i := mustInterceptorT(t, rec, WithKey(KeyByMetadata("x-api-key", MissingReject)))
	big := strings.Repeat("k", 64<<10)
	h := func(context.Context, any) (any, error) { return nil, nil }
	for n := range 200 {
		_, err := i.Unary()(callCtx(tcp("192.0.2.1:4711"), "x-api-key", strconv.Itoa(n)+big), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, h)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "256 bytes (MaxKeyBytes)") {
			t.Fatalf("call %d: %v %q", n, st.Code(), st.Message())
		}
	}
	if len(rec.Keys()) != 0 {
		t.Fatalf("the limiter saw %d keys", len(rec.Keys()))
	}
	if s := i.Stats(); s != (Stats{Rejected: 200}) {
		t.Fatalf("Stats %+v", s)
	}
}

// TestEveryKeyIsCapped: the cap holds for the key the Interceptor is about
// to pass to the limiter, whatever Key built it. Before, a KeyFunc or a
// Compose could pass keys of any length.
func TestEveryKeyIsCapped(t *testing.T) {
	part := func(n int) Key {
		return KeyFunc(func(context.Context, string) (string, error) { return strings.Repeat("p", n), nil })
	}
	for _, tc := range []struct {
		name string
		key  Key
		want codes.Code
	}{
		{"KeyFunc at the cap", part(MaxKeyBytes), codes.OK},
		{"KeyFunc above the cap", part(MaxKeyBytes + 1), codes.InvalidArgument},
		{"Compose above the cap", Compose(part(240), KeyByMethod()), codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &adaptertest.Recorder{}
			i := mustInterceptorT(t, rec, WithKey(tc.key))
			_, err := i.Unary()(callCtx(tcp("192.0.2.1:4711")), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, func(context.Context, any) (any, error) { return nil, nil })
			st := status.Convert(err)
			if st.Code() != tc.want {
				t.Fatalf("%v %q, want %v", st.Code(), st.Message(), tc.want)
			}
			if tc.want != codes.OK && (!strings.Contains(st.Message(), "above the cap of 256 bytes (MaxKeyBytes)") || len(rec.Keys()) != 0) {
				t.Fatalf("%q; the limiter saw %d keys", st.Message(), len(rec.Keys()))
			}
		})
	}
}

// TestEngineKeyCapIsInvalidArgument: a key the engine refuses for its own
// lower Config.MaxKeyBytes is InvalidArgument on the server, and on the
// client; and the client refuses keys above MaxKeyBytes itself.
func TestEngineKeyCapIsInvalidArgument(t *testing.T) {
	e, _ := newEngine(t, engine.Config{MaxKeyBytes: 8})
	i := mustInterceptorT(t, e, WithKey(KeyByMetadata("x-api-key", MissingReject)))
	_, err := i.Unary()(callCtx(tcp("192.0.2.1:4711"), "x-api-key", "0123456789"), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, func(context.Context, any) (any, error) { return nil, nil })
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "Config.MaxKeyBytes") {
		t.Fatalf("%v %q", st.Code(), st.Message())
	}
	if s := i.Stats(); s != (Stats{Rejected: 1}) || e.Len() != 0 {
		t.Fatalf("Stats %+v, engine keys %d", s, e.Len())
	}
	c, err := NewClient(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(context.Background(), "0123456789", 1); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("client, engine cap: %v", err)
	}
	if err := c.Wait(context.Background(), strings.Repeat("k", MaxKeyBytes+1), 1); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("client, MaxKeyBytes: %v", err)
	}
	if s := c.Stats(); s.Refused != 2 || e.Len() != 0 {
		t.Fatalf("client Stats %+v, engine keys %d", s, e.Len())
	}
}
