package grpclimit

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/engine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// TestMethodCost: per-method costs, a free method, and a cost above a
// per-key limit answered FailedPrecondition with the fields.
func TestMethodCost(t *testing.T) {
	e, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow})
	i := mustInterceptorT(t, e, WithMethodCost(mBig, 3), WithMethodCost(mSay, 0))
	cc := serveUnary(t, i)
	for n, want := range []string{"r=2", "r=2"} {
		if r := say(t, cc, nil, mBig); n == 0 && (r.code != codes.OK || !strings.Contains(r.header.Get(MDRateLimit)[0], want)) {
			t.Fatalf("Big: %v %v", r.code, r.header)
		} else if n == 1 && r.code != codes.ResourceExhausted {
			t.Fatalf("second Big: %v, want ResourceExhausted", r.code)
		}
	}
	for range 3 {
		if r := say(t, cc, nil, mSay); r.code != codes.OK || r.header.Get(MDRateLimit)[0] != `"default";r=2;t=10` {
			t.Fatalf("free Say: %v %v", r.code, r.header)
		}
	}

	// Per-key limits: a tenant whose limit is below the cost.
	ek, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: engine.FixedWindow, KeyLimit: func(string) int64 { return 2 }})
	ik := mustInterceptorT(t, ek, WithMethodCost(mBig, 3))
	r := say(t, serveUnary(t, ik), nil, mBig)
	if r.code != codes.FailedPrecondition || r.msg != "grpclimit: call cost 3 exceeds the limit 2 per window" || r.retry != -1 {
		t.Errorf("cost above the key's limit: %v %q retry %v", r.code, r.msg, r.retry)
	}
	wantMD(t, r.header, MDRateLimit, `"default";r=2`)
	if s := ik.Stats(); s != (Stats{Rejected: 1}) {
		t.Errorf("Stats %+v", s)
	}

	// WithCost: a negative result is a bug, Internal.
	ic := mustInterceptorT(t, e, WithCost(func(_ context.Context, m string) int64 { return -1 }))
	if r := say(t, serveUnary(t, ic), nil, mSay); r.code != codes.Internal {
		t.Errorf("negative cost: %v", r.code)
	}
}

// A cost function that passes a caller's number through can ask for
// math.MaxInt64: it is FailedPrecondition, never admitted, on a SlidingLog
// key holding a unit and on a key whose limit SetLimit lowered below what
// it holds. Before, the engine's comparison wrapped and the handler ran.
func TestCostNearMaxInt64IsFailedPrecondition(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		for _, lowered := range []bool{false, true} {
			e, _ := newEngine(t, engine.Config{Limit: 5, Algorithm: alg, PerKeyLimits: true})
			cost := int64(4)
			i := mustInterceptorT(t, e, WithKey(KeyByMethod()), WithCost(func(context.Context, string) int64 { return cost }))
			cc, es := serve(t, grpc.UnaryInterceptor(i.Unary()))
			if r := say(t, cc, nil, mSay); r.code != codes.OK {
				t.Fatalf("%v: cost 4: %v", alg, r.code)
			}
			if lowered {
				if err := e.SetLimit(mSay, 2); err != nil {
					t.Fatal(err)
				}
			}
			for _, cost = range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 3} {
				if r := say(t, cc, nil, mSay); r.code != codes.FailedPrecondition {
					t.Errorf("%v lowered=%v cost %d: %v %q, want FailedPrecondition", alg, lowered, cost, r.code, r.msg)
				}
			}
			if runs := es.count(); runs != 1 {
				t.Errorf("%v lowered=%v: the handler ran %d times, want 1", alg, lowered, runs)
			}
		}
	}
}
