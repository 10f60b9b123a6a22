package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// TestAuditCountsEveryCancelOfALaggingKey: every successful Cancel of an
// audited reservation is counted once in AuditReport.Unadmits (and, its
// units being inside the window, never in UnadmitMissed), also when a
// drain falls between the cancel's unadmit and its settling event and the
// key lags more than two windows behind the audit's newest time. The
// audit once pruned the record of such an unadmit before its settle was
// replayed, losing the cancel (29,997 of 30,000 counted, Dropped 0).
func TestAuditCountsEveryCancelOfALaggingKey(t *testing.T) {
	for _, alg := range allAlgorithms {
		for _, lagging := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/lagging=%v", alg, lagging), func(t *testing.T) {
				testAuditCancelCounts(t, alg, lagging)
			})
		}
	}
}

func testAuditCancelCounts(t *testing.T, alg engine.Algorithm, lagging bool) {
	const W = time.Second
	e := newEngine(t, engine.Config{Limit: 100, Window: W, Algorithm: alg, Audit: 1, DisableEviction: true})
	// Closed: no background drain, so that the test alone chooses where
	// drains fall (a drain between a reservation and its cancel would
	// drop the lagging key's idle log, and count the cancel as missed).
	e.Close()
	drains := 0
	defer engine.SetAuditCancelHook(func() { e.Audit(); drains++ })()
	const rounds = 2000
	var succeeded int64
	for i := range rounds {
		// The other key moves the audit's time on by a quarter window per
		// round (so that each drain prunes); the key under test stays at
		// t0 (lagging) or keeps up with it.
		now := t0.Add(3*W + time.Duration(i)*W/4)
		e.AllowAt("other", 1, now)
		at := now
		if lagging {
			at = t0
		}
		r := e.ReserveAt("k", 1, at)
		if !r.Decision().Allowed {
			t.Fatalf("round %d: reservation refused: %+v", i, r.Decision())
		}
		if r.Cancel() { // the hook drains between its unadmit and its settle
			succeeded++
		}
	}
	rep := e.Audit()
	if drains != rounds || succeeded != rounds {
		t.Fatalf("drains %d, successful cancels %d, want %d each", drains, succeeded, rounds)
	}
	if rep.Dropped != 0 {
		t.Fatalf("Dropped %d: the test needs a buffer that never fills", rep.Dropped)
	}
	if rep.Unadmits != succeeded || rep.UnadmitMissed != 0 {
		t.Fatalf("%d successful cancels, the audit counted Unadmits %d, UnadmitMissed %d; want %d, 0", succeeded, rep.Unadmits, rep.UnadmitMissed, succeeded)
	}
}
