package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestAuditWorstKeyIndependentOfDrains: two engines given the same
// decisions, one drained after each decision and one only at the end,
// report the same WorstKey when two keys tie for the worst window. The
// first key replayed used to win the tie, and a batch is replayed by
// sub-window while batches come in arrival order, so the report depended
// on where the drain boundaries fell (TestAllowAllMatchesTwinEngine failed on
// one run in two).
func TestAuditWorstKeyIndependentOfDrains(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			mk := func() *engine.Engine {
				e := newEngine(t, engine.Config{Limit: 1, Window: time.Second, Algorithm: alg, Audit: 1, DisableEviction: true})
				e.Close() // no background drain: the test places them
				return e
			}
			each, once := mk(), mk()
			// "b" first in the engines' order, "a" at an earlier time:
			// drained one by one "b" is replayed first, drained together
			// "a" is (its sub-window is older).
			for _, q := range []struct {
				key string
				at  time.Duration
			}{{"b", 500 * time.Millisecond}, {"a", 100 * time.Millisecond}} {
				for _, e := range []*engine.Engine{each, once} {
					if !e.AllowAt(q.key, 1, t0.Add(q.at)).Allowed {
						t.Fatalf("%s refused", q.key)
					}
				}
				each.Audit()
			}
			re, ro := each.Audit(), once.Audit()
			if re.WorstKey != "a" || ro.WorstKey != "a" || re.WorstWindow != 1 || re != ro {
				t.Fatalf("drained each time: %q %v; drained once: %q %v; want \"a\" (the least of the tied keys) at 1 in both\n%+v\n%+v", re.WorstKey, re.WorstWindow, ro.WorstKey, ro.WorstWindow, re, ro)
			}
		})
	}
}
