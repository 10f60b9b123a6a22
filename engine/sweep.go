package engine

import "time"

// scrubEvery returns how many sweeper passes go by between scrubs of live
// rings. A scrub must reach every live ring well within 2^23 sub-windows;
// one pass in up to 16 (fewer when a pass is long against the sub-window)
// keeps that under 2^20, and saves the sweeper reading whole rings.
func scrubEvery(pass time.Duration, width int64) int {
	perPass := int64(pass) / width // sub-windows per pass
	if perPass == 0 {
		return 16
	}
	return int(max(1, min(16, (1<<20)/perPass)))
}

// sweeper reclaims idle keys incrementally: each tick it sweeps one shard,
// so a full pass over the table takes SweepInterval and no pass ever holds
// more than one shard's worth of work. It exits when Close closes stop.
func (e *Engine) sweeper() {
	defer close(e.done)
	tick := e.cfg.sweep / time.Duration(e.tab.Shards())
	if tick < time.Millisecond {
		tick = time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	every := scrubEvery(e.cfg.sweep, e.cfg.width)
	next, pass := 0, 0
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			e.tab.SweepShard(next, e.clk.UnixNano(), pass%every == 0)
			if next++; next == e.tab.Shards() {
				next, pass = 0, pass+1
			}
		}
	}
}

// Sweep runs one full pass over every shard now, by the engine's clock, and
// returns the number of keys reclaimed. The background sweeper does the same
// work a shard at a time; Sweep is for tests, for engines with
// DisableEviction, and for callers that want memory back at once. A key is
// reclaimed when nothing it recorded is inside its window any more (idle
// for longer than Window plus one sub-window); an increment racing with the
// reclamation is retried on a fresh state, never lost.
func (e *Engine) Sweep() int {
	now := e.clk.UnixNano()
	n := 0
	for i := 0; i < e.tab.Shards(); i++ {
		n += e.tab.SweepShard(i, now, true)
	}
	return n
}
