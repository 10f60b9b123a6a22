package engine

import "time"

// sweeper reclaims idle keys incrementally: each tick it sweeps one shard,
// so a full pass over the table takes SweepInterval and no pass ever holds
// more than one shard's worth of work. With Config.Audit it also drains the
// audit's buffer every AuditDrainInterval and whenever a quarter buffer
// has filled (and does only that with DisableEviction). It exits when
// Close closes stop.
func (e *Engine) sweeper() {
	defer close(e.done)
	var sweepC, auditC <-chan time.Time
	var kick <-chan struct{}
	if !e.cfg.DisableEviction {
		tick := e.cfg.sweep / time.Duration(e.tab.Shards())
		if tick < time.Millisecond {
			tick = time.Millisecond
		}
		t := time.NewTicker(tick)
		defer t.Stop()
		sweepC = t.C
	}
	if e.audit != nil {
		t := time.NewTicker(AuditDrainInterval)
		defer t.Stop()
		auditC = t.C
		kick = e.audit.kick
	}
	next := 0
	for {
		select {
		case <-e.stop:
			return
		case <-auditC:
			e.audit.drain()
		case <-kick:
			e.audit.drain()
		case <-sweepC:
			e.tab.SweepShard(next, e.clk.UnixNano())
			if next++; next == e.tab.Shards() {
				next = 0
			}
		}
	}
}

// Sweep runs one full pass over every shard now, by the engine's clock, and
// returns the number of keys reclaimed. The background sweeper does the same
// work a shard at a time; Sweep is for tests, for engines with
// DisableEviction, and for callers that want memory back at once; it may
// run concurrently with the background sweeper and with other Sweep calls.
// A key is reclaimed once it has been idle for longer than Window plus one
// sub-window (FixedWindow: 2·Window; SlidingLog: Window), and kept while
// idle for that long or less, with its counts and its SetLimit override. An
// increment racing with the reclamation is retried on a fresh state, never
// lost.
func (e *Engine) Sweep() int {
	now := e.clk.UnixNano()
	n := 0
	for i := 0; i < e.tab.Shards(); i++ {
		n += e.tab.SweepShard(i, now)
	}
	return n
}
