package grpclimit

import (
	"context"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// emptyKeys are Keys whose function gives an empty (or blank) key, each
// way a key function's result reaches the limiter.
func emptyKeys() map[string]Key {
	empty := KeyFunc(func(context.Context, string) (string, error) { return "", nil })
	return map[string]Key{
		"KeyFunc":                         empty,
		"KeyFunc of white space":          KeyFunc(func(context.Context, string) (string, error) { return " \t", nil }),
		"Compose, first part":             Compose(empty, KeyByIP(64)),
		"Compose, last part":              Compose(KeyByMethod(), empty),
		"Compose of empty parts":          Compose(empty, empty),
		"KeyByMetadata's MissingFallback": KeyByMetadata("x-api-key", MissingFallback(empty)),
	}
}

// serveCall runs one unary call to mSay from addr through i, and returns
// its status and whether the handler ran.
func serveCall(i *Interceptor, addr string) (*status.Status, bool) {
	ran := false
	_, err := i.Unary()(callCtx(tcp(addr)), nil, &grpc.UnaryServerInfo{FullMethod: mSay}, func(context.Context, any) (any, error) {
		ran = true
		return nil, nil
	})
	return status.Convert(err), ran
}

// An empty key from any key function is a key error: InvalidArgument,
// counted Rejected, nothing stored; never one bucket shared by every
// client that gets it. Before, three clients whose KeyFunc returned ""
// shared one bucket of Limit 2: OK, OK, ResourceExhausted.
func TestEmptyKeyIsAKeyError(t *testing.T) {
	for name, k := range emptyKeys() {
		t.Run(name, func(t *testing.T) {
			e, _ := newEngine(t, engine.Config{Limit: 2})
			i := mustInterceptorT(t, e, WithKey(k))
			for _, addr := range []string{"192.0.2.1:4711", "192.0.2.2:4711", "192.0.2.3:4711"} {
				st, ran := serveCall(i, addr)
				if st.Code() != codes.InvalidArgument || ran || !strings.Contains(st.Message(), "the key is empty") {
					t.Errorf("client %s: %v %q (handler ran: %v), want InvalidArgument naming the empty key", addr, st.Code(), st.Message(), ran)
				}
			}
			if s := i.Stats(); s != (Stats{Rejected: 3}) || e.Len() != 0 {
				t.Errorf("Stats %+v, engine keys %d; want Rejected 3 and nothing stored", s, e.Len())
			}
		})
	}
}

// Under NewMultiInterceptor, an empty key of any policy refuses the call
// before any policy is charged.
func TestEmptyKeyOfOnePolicy(t *testing.T) {
	ip, _ := newEngine(t, engine.Config{})
	tenant, _ := newEngine(t, engine.Config{})
	i, err := NewMultiInterceptor([]Policy{
		{Name: "ip", Limiter: ip},
		{Name: "tenant", Limiter: tenant, Key: emptyKeys()["KeyFunc"]},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, ran := serveCall(i, "192.0.2.1:4711"); st.Code() != codes.InvalidArgument || ran {
		t.Fatalf("%v %q (handler ran: %v), want InvalidArgument", st.Code(), st.Message(), ran)
	}
	if s := i.Stats(); s != (Stats{Rejected: 1}) || ip.Len() != 0 || tenant.Len() != 0 {
		t.Errorf("Stats %+v, keys %d and %d; want nothing charged", s, ip.Len(), tenant.Len())
	}
}

// The client-side limit refuses an empty key too (WithClientKey's, or
// Wait's own argument): InvalidArgument, counted Refused, and the limiter
// never sees it.
func TestClientEmptyKey(t *testing.T) {
	rec := &adaptertest.Recorder{}
	c, err := NewClient(rec, WithClientKey(func(context.Context, *grpc.ClientConn, string) string { return "" }))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"", " "} {
		if err := c.Wait(context.Background(), key, 1); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the key is empty") {
			t.Errorf("Wait(%q) = %v, want InvalidArgument naming the empty key", key, err)
		}
	}
	invoked := false
	err = c.Unary()(context.Background(), mSay, nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		invoked = true
		return nil
	})
	if status.Code(err) != codes.InvalidArgument || invoked {
		t.Errorf("unary call with WithClientKey's empty key: %v (sent: %v), want InvalidArgument", err, invoked)
	}
	if s := c.Stats(); s != (ClientStats{Refused: 3}) || len(rec.Keys()) != 0 {
		t.Errorf("Stats %+v; the limiter saw %q", s, rec.Keys())
	}
}
