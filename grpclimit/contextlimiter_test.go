package grpclimit

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adaptertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// TestContextLimiter: a ContextLimiter's decisions are served like the
// engine's; the call's context reaches it; an error follows the Decision
// returned with it, counted as Errors, without fields.
func TestContextLimiter(t *testing.T) {
	var d engine.Decision
	var err error
	f := newRemote(func(string, int64) (engine.Decision, error) { return d, err })
	i := mustInterceptorT(t, f, WithPolicyName("shared", 10*time.Second))
	cc := serveUnary(t, i)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "trace", "abc")

	d, err = engine.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
	r := say(t, cc, ctx, mSay)
	if r.code != codes.OK {
		t.Fatal(r.code)
	}
	wantMD(t, r.header, MDPolicy, `"shared";q=10;w=10`)
	wantMD(t, r.header, MDRateLimit, `"shared";r=9`) // no Config: no t= on admission

	d, err = engine.Decision{Allowed: true, Limit: 10, Remaining: 10}, adaptertest.ErrBackend // fail-open
	if r := say(t, cc, ctx, mSay); r.code != codes.OK || r.header.Get(MDRateLimit) != nil {
		t.Errorf("fail-open: %v %v", r.code, r.header)
	}
	d, err = engine.Decision{Limit: 10, RetryAfter: 250 * time.Millisecond}, adaptertest.ErrBackend // fail-closed
	r = say(t, cc, ctx, mSay)
	if r.code != codes.Unavailable || r.retry != 250*time.Millisecond || r.header.Get(MDRateLimit) != nil {
		t.Errorf("fail-closed: %v retry %v %v", r.code, r.retry, r.header)
	}
	d, err = engine.Decision{Limit: 10, RetryAfter: engine.Never}, adaptertest.ErrBackend
	if r := say(t, cc, ctx, mSay); r.code != codes.Unavailable || r.retry != -1 {
		t.Errorf("fail-closed without a wait: %v retry %v", r.code, r.retry)
	}
	// A limited answer from a working backend is a normal denial.
	d, err = engine.Decision{Limit: 10, Remaining: 0, RetryAfter: 1500 * time.Millisecond}, nil
	if r := say(t, cc, ctx, mSay); r.code != codes.ResourceExhausted || r.retry != 1500*time.Millisecond {
		t.Errorf("limited: %v retry %v", r.code, r.retry)
	}
	if s := i.Stats(); s != (Stats{Allowed: 1, Denied: 1, Errors: 3}) {
		t.Errorf("Stats %+v", s)
	}
	for n, tr := range f.Traces {
		if tr != "abc" {
			t.Errorf("call %d: the limiter saw trace %q, want the call's metadata", n, tr)
		}
	}
}
