package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

func TestReview6AllowAllZeroFirst(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingWindowStrict, engine.SlidingLog} {
		e := advNew(t, engine.Config{Limit: 2, Window: time.Second, SubWindows: 10, Algorithm: alg, Audit: 1, DisableEviction: true})
		t0 := advMs(advT0, 925)
		idx, _ := engine.AllowAll(t0, engine.Request{Engine: e, Key: "a", N: 0}, engine.Request{Engine: e, Key: "a", N: 2}, engine.Request{Engine: e, Key: "a", N: 1})
		d := e.AllowAt("a", 2, advMs(t0, 10))
		rep := e.Audit()
		t.Logf("%v idx=%d admit=%v %+v", alg, idx, d.Allowed, rep)
		if rep.FalseAdmits != 0 {
			t.Errorf("%v: false admit", alg)
		}
	}
}
