package engine

import (
	"os"
	"time"

	"github.com/ringlimit/ringlimit/internal/clock"
	"github.com/ringlimit/ringlimit/shard"
)

// AllowAtTrace is AllowAt that also returns the decision's effective epoch
// (SlidingLog: effective time, ns): now's, or the key's newest if now is
// older, or a retired state's retirement epoch; −1 for a refused time. The
// stress test records admissions with it.
func (e *Engine) AllowAtTrace(key string, n int64, now time.Time) (Decision, int64) {
	t := clock.UnixNano(now)
	if res, limit, ok := e.fast(key, n, t, true); ok {
		return decision(res, limit), res.Epoch
	}
	return e.decideSlow(key, n, t)
}

// Width is the sub-window width in ns (Window for FixedWindow and
// SlidingLog), and Span is N (0 for FixedWindow and SlidingLog).
func (e *Engine) Width() int64 { return e.cfg.width }
func (e *Engine) Span() int    { return e.cfg.n }

// Epoch is the effective epoch (SlidingLog: time, ns) r's units were
// recorded at, for the checkers.
func (r *Reservation) Epoch() int64 { return r.at }

// SetWaitHook sets the hook Wait calls before each sleep, and returns a
// function that removes it.
func SetWaitHook(f func(d Decision, wait time.Duration)) func() {
	testHookWaitSleep = f
	return func() { testHookWaitSleep = nil }
}

// NewDrivenCoarse returns an engine whose coarse clock (cfg.CoarseClock >
// 0) reads src and refreshes only when refresh is called: a test chooses
// every gap between two refreshes, the coarse clock's error.
func NewDrivenCoarse(cfg Config, src Clock) (e *Engine, refresh func(), err error) {
	c := clock.NewCoarseDriven(src, cfg.CoarseClock)
	e, err = newEngine(cfg, c)
	return e, c.Refresh, err
}

// SetAuditCancelHook sets the hook an audited Cancel runs between
// buffering its unadmit and the engine's cancel, and returns a function
// that removes it.
func SetAuditCancelHook(f func()) func() {
	testHookAuditCancel = f
	return func() { testHookAuditCancel = nil }
}

// Every engine a test of this package builds starts its home slab at its
// first key, as every table did before the slab waited for
// shard.slabFromKeys keys: most of the tests of the slab's races and
// generations use a few keys, and must keep running on the slab.
// The tests of the threshold (slabthreshold_test.go and others) clear it
// for their own engines with KeepSlabThreshold. With
// RINGLIMIT_SLAB=default the engines keep the default threshold, so that
// the reference-model tests also run on the map alone, as a table below
// the threshold decides (make test runs them so: Makefile, maponly).
func init() {
	if os.Getenv("RINGLIMIT_SLAB") != "default" {
		testHookNewTable = func(t *shard.Table) { t.SlabFrom(0) }
	}
}

// KeepSlabThreshold makes the engines New builds, until restore is called,
// keep their table's default slab threshold (shard.slabFromKeys) instead
// of the slab from the first key. Tests that call it must not run in
// parallel with others that build engines.
func KeepSlabThreshold() (restore func()) {
	old := testHookNewTable
	testHookNewTable = nil
	return func() { testHookNewTable = old }
}

// SlabGen identifies the key table's newest home slab (shard's SlabID): 0
// while the table has none (below the threshold, or after a sweep dropped
// them). Two slabs alive at once never share it.
func (e *Engine) SlabGen() uintptr { return e.tab.SlabID() }
