package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/internal/clock"
	"github.com/ringlimit/ringlimit/ringslot"
	"github.com/ringlimit/ringlimit/shard"
)

// Engine decides, for any string key, whether n more units fit the key's
// limit in a sliding window. It is safe for concurrent use.
//
// A decision on an existing key takes no lock and allocates nothing (with
// SlidingLog it holds the key's own spin lock); a key's first request
// creates its state under one map bucket lock. Under contention on one key
// a request can be refused that a sequential run would admit (a false
// denial); none is ever admitted that the algorithm would refuse.
// docs/design.md has the protocol and its proofs.
type Engine struct {
	cfg      normalized
	geo      *ringslot.Geometry
	tab      *shard.Table
	clk      Clock
	coarse   *clock.Coarse
	mono     *clock.Monotonic // the default clock, when neither Clock nor CoarseClock is set
	limit    int64
	maxLimit int64 // of any key: MaxLimit, or the log's cap
	perKey   bool
	keyLimit func(string) int64
	// auditBelow is the sampling threshold of Config.Audit (0: off), and
	// audit the self-audit, nil when off.
	auditBelow uint64
	audit      *auditor
	// claims hand out the word each admitted Reservation's copies share
	// (claim.go).
	claims []claimCursor

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// testHookNewTable, when a test sets it, runs on each engine's key table
// as New builds it (engine's export_test.go starts every test engine's
// home slab at its first key).
var testHookNewTable func(*shard.Table)

// New validates cfg and returns a running Engine. Close it to stop the
// goroutines it owns: the sweeper, and the coarse clock if configured.
func New(cfg Config) (*Engine, error) { return newEngine(cfg, nil) }

// newEngine is New with, when cfg has a CoarseClock, that clock given (a
// test drives its refreshes by hand); nil starts the engine's own.
func newEngine(cfg Config, coarse *clock.Coarse) (*Engine, error) {
	nc, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	geo := ringslot.NewGeometry(nc.width, nc.n, nc.Algorithm == SlidingWindow, nc.PerKeyLimits)
	limit := nc.Limit
	switch nc.Algorithm {
	case SlidingLog:
		geo = ringslot.NewLog(int64(nc.Window))
	case TokenBucket:
		// A bucket's limit, as the engine passes it around (n ≤ limit,
		// Decision.Limit), is its Burst; the rate is the geometry's.
		geo = ringslot.NewBucket(nc.Limit, int64(nc.Window), nc.burst)
		limit = nc.burst
	}
	if hi := shard.PresizeMax(geo); nc.ExpectedKeys > hi {
		return nil, fmt.Errorf("ringlimit: Config.ExpectedKeys = %d, want 0 (grow as keys come) or 1 … %d for this configuration (its presized key table within %d MiB)", nc.ExpectedKeys, hi, shard.MaxPresizeBytes>>20)
	}
	e := &Engine{
		cfg:      nc,
		geo:      geo,
		tab:      shard.New(geo, nc.shards, nc.MaxKeys),
		clk:      nc.Clock,
		limit:    limit,
		maxLimit: nc.maxLimit,
		perKey:   nc.PerKeyLimits,
		keyLimit: nc.KeyLimit,
		claims:   newClaims(nc.shards),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if testHookNewTable != nil {
		testHookNewTable(e.tab)
	}
	e.tab.Presize(nc.ExpectedKeys)
	if nc.Audit > 0 {
		e.auditBelow = nc.auditBelow
		e.audit = newAuditor(nc)
	}
	if e.clk == nil {
		if nc.CoarseClock > 0 {
			if coarse == nil {
				coarse = clock.NewCoarse(nc.CoarseClock)
			}
			e.coarse = coarse
			e.clk = e.coarse
		} else {
			e.mono = clock.NewMonotonic()
			e.clk = e.mono
		}
	}
	if nc.DisableEviction && e.audit == nil {
		close(e.done)
	} else {
		go e.sweeper()
	}
	return e, nil
}

// Allow is shorthand for AllowN(key, 1).Allowed.
//
// It computes neither Remaining nor RetryAfter, so its deny path only reads
// the key's slots (with SlidingLog, under the key's lock).
func (e *Engine) Allow(key string) bool {
	var t int64 // e.now() written out (too costly to inline): saves its call, about 12 instructions
	switch {
	case e.mono != nil:
		t = e.mono.UnixNano()
	case e.coarse != nil:
		t = e.coarse.UnixNano()
	default:
		t = e.clk.UnixNano()
	}
	if res, _, ok := e.fast(key, 1, t, false); ok {
		return res.Allowed
	}
	d, _ := e.decideSlow(key, 1, t)
	return d.Allowed
}

// AllowN is shorthand for AllowAt(key, n, now) with now from the engine's
// clock.
func (e *Engine) AllowN(key string, n int64) Decision {
	var t int64 // e.now() written out (too costly to inline): saves its call, about 12 instructions
	switch {
	case e.mono != nil:
		t = e.mono.UnixNano()
	case e.coarse != nil:
		t = e.coarse.UnixNano()
	default:
		t = e.clk.UnixNano()
	}
	if res, limit, ok := e.fast(key, n, t, true); ok {
		return decision(res, limit)
	}
	d, _ := e.decideSlow(key, n, t)
	return d
}

// now reads the engine's clock. The engine's own clocks are read through
// their concrete types, without the interface call: the coarse clock is
// one atomic load, the default one the runtime's monotonic clock and an add.
//
// Allow and AllowN read it written out, in this order.
func (e *Engine) now() int64 {
	if e.mono != nil {
		return e.mono.UnixNano()
	}
	if e.coarse != nil {
		return e.coarse.UnixNano()
	}
	return e.clk.UnixNano()
}

// AllowAt decides whether n units for key fit at time now, and records them
// if they do.
//
//   - n == 0 is allowed and records nothing; the Decision reports Remaining.
//   - n < 0, and n above the key's limit, are refused with RetryAfter
//     Never and record nothing: never a refund.
//   - A now before 1970 or after 2262-04-11 is refused with RetryAfter
//     Never and leaves the key untouched (judged by the time.Time itself,
//     so a year-1000 time never wraps into 2169).
//
// Time never runs backwards for a key: a now older than the newest
// sub-window the key has seen is decided at the start of that sub-window
// (SlidingLog: at the key's newest time), gaining no capacity, and
// RetryAfter still counts from now. Idle keys are reclaimed by the
// engine's Clock, not by now (see Config.DisableEviction). A new key
// decided more than a sub-window behind the Clock may be decided at its
// shard's latest reclamation time instead of now: a loss of capacity,
// never a false admission (docs/semantics.md, "Idle keys"; docs/design.md
// §5).
func (e *Engine) AllowAt(key string, n int64, now time.Time) Decision {
	t := clock.UnixNano(now) // −1 outside 1970 … 2262: refused in decideSlow
	if res, limit, ok := e.fast(key, n, t, true); ok {
		return decision(res, limit)
	}
	d, _ := e.decideSlow(key, n, t)
	return d
}

// fast is the decision path for the common case, an existing key and
// 1 ≤ n ≤ limit at t ≥ 0 (Unix ns); ok is false for everything else, which
// decideSlow handles. It returns the ring's Result rather than a Decision so
// that nothing is copied through memory between frames. Without detail it
// leaves Remaining and RetryAfter out (ringslot.Admit), for Allow. A limit
// lowered between its read here and the decision makes the Result Stale
// (and Dead): decideSlow reads the limit again (docs/design.md §3c).
func (e *Engine) fast(key string, n, t int64, detail bool) (res ringslot.Result, limit int64, ok bool) {
	if t < 0 || n < 1 || len(key) > e.cfg.maxKey { // Config.MaxKeyBytes: one compare, before the hash
		return res, 0, false
	}
	h := e.tab.Hash(key)
	r, found := e.tab.Load(h, key)
	if !found {
		return res, 0, false
	}
	limit = e.ringLimit(r)
	if n > limit {
		return res, 0, false
	}
	if e.sampled(h) { // the only cost of Config.Audit to an unsampled key
		return e.acquireAudited(r, key, n, t, limit)
	}
	if detail {
		res = e.geo.Acquire(r, t, n, limit)
	} else {
		res.Allowed, res.Dead = e.geo.Admit(r, t, n, limit)
	}
	return res, limit, !res.Dead
}

// decision converts a ring's Result.
func decision(res ringslot.Result, limit int64) Decision {
	return Decision{Allowed: res.Allowed, Limit: limit, Remaining: res.Remaining, RetryAfter: time.Duration(res.RetryAfter)}
}

// decideSlow handles new, retired and absent keys, bad times, and n outside
// 1 … limit. It also returns the decision's effective epoch (a log: time),
// or −1 for a refused time, for the stress test's checker.
func (e *Engine) decideSlow(key string, n, t int64) (Decision, int64) {
	d, _, at, _ := e.decideRing(key, n, t)
	return d, at
}

// decideRing is decideSlow that also returns the ring the decision was made
// on (invalid when it was made on none) and, for a key the self-audit
// samples, the admission's id in its log (0: none), for ReserveAt.
//
//go:noinline
func (e *Engine) decideRing(key string, n, t int64) (Decision, ringslot.Ring, int64, uint64) {
	if len(key) > e.cfg.maxKey {
		return keyTooLong, ringslot.Ring{}, -1, 0
	}
	if t < 0 {
		return Decision{Limit: e.limit, RetryAfter: Never}, ringslot.Ring{}, -1, 0
	}
	h := e.tab.Hash(key)
	r, ok := e.tab.Load(h, key)
	for {
		var limit int64
		if !ok {
			var err refusal
			if r, limit, err = e.create(h, key, n, t); err != refusedNone {
				d := Decision{Limit: limit, RetryAfter: Never}
				if err == refusedKeysFull {
					// The key has used nothing: its full limit remains.
					d.Remaining = limit
					d.RetryAfter = e.cfg.idle
				}
				return d, ringslot.Ring{}, e.geo.EpochOf(t), 0
			}
			if !r.Valid() { // a peek at an absent key: its window is empty
				return emptyDecision(n, limit), ringslot.Ring{}, e.geo.EpochOf(t), 0
			}
		} else {
			limit = e.ringLimit(r)
		}
		var res ringslot.Result
		if n >= 1 && n <= limit {
			res = e.geo.Acquire(r, t, n, limit)
		} else {
			// n outside 1 … limit: the ring is asked for Remaining only,
			// and the verdict is set below (docs/design.md §1).
			res = e.geo.Peek(r, t, 0, limit)
		}
		if res.Stale {
			// The key's limit was lowered under the decision, which
			// recorded nothing: decide again under the limit in force
			// (docs/design.md §3c).
			continue
		}
		if res.Dead {
			// Retired by idleness or the sweeper: the key starts fresh.
			if n < 1 || n > limit {
				if nr, moved := e.moveBucket(h, key, r, t); moved {
					r, ok = nr, true // a bucket's ring moved: peek at the new one
					continue
				}
				// A peek creates nothing; the window is empty from the
				// retirement on.
				return emptyDecision(n, limit), ringslot.Ring{}, e.geo.EpochOf(max(t, e.geo.RetiredAt(r))), 0
			}
			r, ok = e.replace(h, key, r, t)
			continue
		}
		d := decision(res, limit)
		var aid uint64
		switch {
		case n == 0: // even where a clamped time puts the estimate over the limit
			d.Allowed, d.RetryAfter = true, 0
		case n < 0 || n > limit: // never a refund; never more than the limit
			d.Allowed, d.RetryAfter = false, Never
		case e.sampled(h):
			aid = e.audit.record(key, e.effective(t, res.Epoch), n, limit, d.Allowed)
		}
		return d, r, res.Epoch, aid
	}
}

// emptyDecision is the Decision for n units at a key with nothing recorded.
func emptyDecision(n, limit int64) Decision {
	if n < 0 || n > limit {
		return Decision{Limit: limit, Remaining: limit, RetryAfter: Never}
	}
	return Decision{Allowed: true, Limit: limit, Remaining: limit}
}

// Config returns the engine's configuration with its defaults applied:
// SubWindows is the N in use (0 for FixedWindow and SlidingLog), Shards the
// shard count, MaxKeyBytes the key cap, MaxLogLimit the log's cap (SlidingLog only), Burst the bucket's capacity (TokenBucket only), SweepInterval
// the sweep period, the Audit caps their defaults (when Audit is set), and
// PerKeyLimits is true when KeyLimit is set. Adapters
// read the window and limit from here rather than asking the user twice.
func (e *Engine) Config() Config {
	c := e.cfg.Config
	c.SubWindows = e.cfg.n
	c.Shards = e.cfg.shards
	c.SweepInterval = e.cfg.sweep
	c.MaxKeyBytes = e.cfg.maxKey
	if c.Algorithm == SlidingLog {
		c.MaxLogLimit = e.cfg.maxLimit
	}
	if c.Algorithm == TokenBucket {
		c.Burst = e.cfg.burst
	}
	if c.Audit > 0 {
		c.AuditMaxKeys, c.AuditMaxEntries, c.AuditBuffer = e.cfg.auditMaxKeys, e.cfg.auditMaxEntries, e.cfg.auditBuffer
	}
	return c
}

// Window returns Config.Window.
func (e *Engine) Window() time.Duration { return e.cfg.Window }

// Len returns the number of keys held.
func (e *Engine) Len() int64 { return e.tab.Len() }

// Stats is a cheap snapshot of the engine's key table. Fields are read
// separately, so they need not be mutually consistent under concurrent use.
type Stats struct {
	Keys    int64 // keys held now
	Evicted int64 // keys reclaimed after being idle
	Refused int64 // new keys refused by MaxKeys
}

// Stats returns the current Stats. It reads one counter per shard and is
// not on the decision path.
func (e *Engine) Stats() Stats {
	return Stats{Keys: e.tab.Len(), Evicted: e.tab.Evicted(), Refused: e.tab.Refused()}
}

// Close stops every goroutine the engine started and waits for them to
// exit. It is idempotent and always returns nil. Decisions still work after
// Close, but idle keys are no longer reclaimed, and the self-audit's buffer
// is drained only by Audit calls (decisions that find it full are counted
// as dropped). A coarse clock's refresher stops, and the engine reads the
// precise clock from then on, so that RetryAfter still comes true and Wait
// still returns.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.stop)
		<-e.done
		if e.coarse != nil {
			e.coarse.Stop()
		}
	})
	return nil
}
