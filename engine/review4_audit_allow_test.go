package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Allow / AllowN / Wait / Reserve on the engine's clock, with a KeyLimit
// limit and a SetLimit override: judged with the limit the engine used.
func TestReview4AuditClockPathsUseKeyLimit(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := engine.NewManualClock(advT0)
			e := advNew(t, engine.Config{Limit: 10, Window: time.Second, SubWindows: 4, Algorithm: alg, Audit: 1, Clock: clk,
				KeyLimit: func(k string) int64 {
					if k == "small" {
						return 3
					}
					return 0
				}})
			for i := 0; i < 5; i++ {
				e.Allow("small")
			}
			for i := 0; i < 3; i++ {
				e.AllowN("small", 1)
				r := e.Reserve("small", 1)
				_ = r.Decision()
			}
			if err := e.SetLimit("big", 2); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4; i++ {
				e.Allow("big")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			e.Wait(ctx, "big", 1)
			cancel()
			rep := e.Audit()
			t.Logf("%+v", rep)
			advConsistent(t, rep)
			if rep.FalseDenies != 0 || rep.FalseAdmits != 0 || rep.WorstWindow != 1 {
				t.Errorf("judged with the wrong limit? %+v", rep)
			}
			if rep.Decisions != 5+6+4 && rep.Decisions != 5+6+4+1 {
				t.Errorf("decisions %d", rep.Decisions)
			}
		})
	}
}
