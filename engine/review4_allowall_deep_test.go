package engine_test

import (
	"runtime/debug"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// AllowAll used one stack frame per request (about 250 bytes): a long
// request list overflowed the goroutine stack, a fatal error no recover
// catches (the fourth adversarial review crashed it with 5M requests). It
// now keeps 8 reservations on its stack and the rest in one slice. The
// stack is capped at 16 MB here, which the old code passed at about 64,000
// requests; a fatal overflow would fail the whole test binary.
func TestReview4AllowAllManyRequests(t *testing.T) {
	old := debug.SetMaxStack(16 << 20)
	defer debug.SetMaxStack(old)
	e := new13(t, engine.Config{Limit: 300_000, Window: time.Second, DisableEviction: true})
	reqs := make([]engine.Request, 200_000)
	for i := range reqs {
		reqs[i] = engine.Request{Engine: e, Key: "k", N: 1}
	}
	if i, d := engine.AllowAll(t13, reqs...); i != -1 || !d.Allowed || d.Remaining != 100_000 {
		t.Fatalf("200,000 requests of 1 unit on a limit of 300,000: %d %+v", i, d)
	}
	// One more than fits: the last is refused and all 200,001 are given
	// back, on the heap slice.
	reqs = append(reqs, engine.Request{Engine: e, Key: "k", N: 100_001})
	e2 := new13(t, engine.Config{Limit: 300_000, Window: time.Second, DisableEviction: true})
	for i := range reqs {
		reqs[i].Engine = e2
	}
	if i, d := engine.AllowAll(t13, reqs...); i != len(reqs)-1 || d.Allowed {
		t.Fatalf("the last request must refuse: %d %+v", i, d)
	}
	if rem := e2.AllowAt("k", 0, t13).Remaining; rem != 300_000 {
		t.Fatalf("after a refused AllowAll of 200,001 requests %d units stay consumed", 300_000-rem)
	}
}
