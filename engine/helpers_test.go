package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// atMs is base plus ms milliseconds.
func atMs(base time.Time, ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

// newEngineNoCloseCheck is newEngine for tests that Close the engine
// themselves (early, or more than once): the cleanup's Close is not checked.
func newEngineNoCloseCheck(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// checkReportConsistent checks the report's sums: Decisions = Admits +
// Denies = Judged + Unjudged.
func checkReportConsistent(t *testing.T, r engine.AuditReport) {
	t.Helper()
	if r.Decisions != r.Admits+r.Denies || r.Decisions != r.Judged+r.Unjudged {
		t.Errorf("inconsistent report: %+v", r)
	}
}
