package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A Cancel of a reservation whose own admission was dropped from a full
// audit buffer pushed a take-back all the same, spending the eighth kept
// for the take-backs of buffered admissions: 300,000 sequential
// reserve-cancel pairs on a 64-cell buffer dropped 274,782 take-backs
// (and, after Close, every one past the first few). A sequential caller's
// take-backs are never dropped, and every successful Cancel is counted
// once in Unadmits, the dropped admissions' ones in UnadmitMissed too.
func TestAuditKeepsSequentialTakeBacksWhenAdmissionsDrop(t *testing.T) {
	t0 := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		closed bool
		pairs  int
	}{
		{"running", false, 50_000},
		{"closed", true, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := engine.New(engine.Config{Limit: 1000, Window: time.Hour, Audit: 1, AuditBuffer: 64, DisableEviction: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if tc.closed {
				e.Close() // no drain runs from here on but Audit's
			}
			cancels := int64(0)
			for range tc.pairs {
				r := e.ReserveAt("k", 1, t0)
				if !r.Decision().Allowed {
					t.Fatal("refused: every reservation is cancelled, so the key never fills")
				}
				if r.Cancel() {
					cancels++
				}
			}
			rep := e.Audit()
			decisionsDropped := int64(tc.pairs) - rep.Decisions
			if takeBacks := rep.Dropped - decisionsDropped; takeBacks != 0 {
				t.Errorf("%d sequential take-backs dropped (Dropped %d, decisions dropped %d)", takeBacks, rep.Dropped, decisionsDropped)
			}
			if rep.Unadmits != cancels {
				t.Errorf("Unadmits %d, want every successful Cancel, %d", rep.Unadmits, cancels)
			}
			if rep.UnadmitMissed < decisionsDropped {
				t.Errorf("UnadmitMissed %d, below the %d cancels of dropped admissions", rep.UnadmitMissed, decisionsDropped)
			}
		})
	}
}
