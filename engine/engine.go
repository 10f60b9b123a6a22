// Package engine is ringlimit's public API: an in-process, lock-free, keyed
// sliding-window limiter.
package engine

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/internal/clock"
	"github.com/ringlimit/ringlimit/ringslot"
	"github.com/ringlimit/ringlimit/shard"
)

// Clock is a time source in Unix nanoseconds.
type Clock = clock.Clock

// ManualClock is a Clock that moves only when told to, for tests and
// simulations. It is safe for concurrent use.
type ManualClock = clock.Manual

// NewManualClock returns a ManualClock reading t.
func NewManualClock(t time.Time) *ManualClock { return clock.NewManual(t) }

// Engine decides, for any string key, whether n more units fit the key's
// limit in a sliding window. It is safe for concurrent use.
//
// The decision path for an existing key takes no lock and does not
// allocate: one xxhash of the key, a lock-free map load, N+2 atomic loads and
// one CAS (see ringslot.Acquire for the protocol). A key's first request, and
// its first after it was reclaimed, creates its state under one xsync bucket
// lock inside the map.
//
// Under contention on one key a request can be refused that a sequential
// execution would admit (a false denial, when it sees another request's add
// that is then undone at a sub-window boundary); no request is ever admitted
// that the algorithm's estimate would refuse.
type Engine struct {
	cfg      normalized
	geo      *ringslot.Geometry
	tab      *shard.Table
	clk      Clock
	coarse   *clock.Coarse
	limit    int64
	perKey   bool
	keyLimit func(string) int64

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New validates cfg and returns a running Engine. Close it to stop the
// goroutines it owns: the sweeper, and the coarse clock if configured.
func New(cfg Config) (*Engine, error) {
	nc, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("ringlimit: seeding the key hash: %w", err)
	}
	geo := ringslot.NewGeometry(nc.width, nc.n, nc.Algorithm == SlidingWindow, nc.PerKeyLimits)
	e := &Engine{
		cfg:      nc,
		geo:      geo,
		tab:      shard.New(geo, nc.shards, binary.LittleEndian.Uint64(seed[:]), nc.MaxKeys),
		clk:      nc.Clock,
		limit:    nc.Limit,
		perKey:   nc.PerKeyLimits,
		keyLimit: nc.KeyLimit,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if e.clk == nil {
		if nc.CoarseClock > 0 {
			e.coarse = clock.NewCoarse(nc.CoarseClock)
			e.clk = e.coarse
		} else {
			e.clk = clock.NewMonotonic()
		}
	}
	if nc.DisableEviction {
		close(e.done)
	} else {
		go e.sweeper()
	}
	return e, nil
}

// Allow is shorthand for AllowN(key, 1).Allowed.
func (e *Engine) Allow(key string) bool { return e.AllowN(key, 1).Allowed }

// AllowN is shorthand for AllowAt(key, n, now) with now from the engine's
// clock.
func (e *Engine) AllowN(key string, n int64) Decision { return e.decide(key, n, e.clk.UnixNano()) }

// AllowAt decides whether n units for key fit at time now, and records them
// if they do.
//
//   - n == 0 is allowed and records nothing; the Decision reports Remaining.
//   - n < 0 is refused (ReasonInvalidN) and records nothing: never a refund.
//   - n above the key's limit is refused (ReasonTooLarge) with RetryAfter
//     Never, and records nothing.
//
// Time never runs backwards for a key: a now older than the newest
// sub-window the key has seen is treated as the start of that sub-window, so
// it gains no capacity and erases nothing. Idle keys are reclaimed by the
// engine's Clock, not by now; see Config.DisableEviction.
func (e *Engine) AllowAt(key string, n int64, now time.Time) Decision {
	return e.decide(key, n, now.UnixNano())
}

// decide is the decision path, with t in Unix nanoseconds. The common case,
// an existing key and 1 ≤ n ≤ limit, is kept small so that its Decision
// travels in registers; everything else goes to decideSlow.
func (e *Engine) decide(key string, n, t int64) Decision {
	if t >= 0 && n >= 1 {
		h := e.tab.Hash(key)
		if r, ok := e.tab.Load(h, key); ok {
			limit := e.limit
			if e.perKey {
				limit = e.geo.Limit(r)
			}
			if n <= limit {
				if res := e.geo.Acquire(r, t, n, limit); !res.Dead {
					reason := ReasonOK
					if !res.Allowed {
						reason = ReasonLimited
					}
					return Decision{Allowed: res.Allowed, Reason: reason, Limit: limit, Remaining: res.Remaining, RetryAfter: time.Duration(res.RetryAfter)}
				}
			}
		}
	}
	return e.decideSlow(key, n, t)
}

// decideSlow handles new, retired and absent keys, bad times, and n outside
// 1 … limit.
//
//go:noinline
func (e *Engine) decideSlow(key string, n, t int64) Decision {
	if t < 0 {
		return Decision{Reason: ReasonInvalidTime, Limit: e.limit, RetryAfter: Never}
	}
	h := e.tab.Hash(key)
	r, ok := e.tab.Load(h, key)
	for {
		var limit int64
		if !ok {
			var reason Reason
			if r, limit, reason = e.create(h, key, n, t); reason != ReasonOK {
				d := Decision{Reason: reason, Limit: limit, RetryAfter: Never}
				if reason == ReasonKeysFull {
					d.RetryAfter = e.cfg.Window + time.Duration(e.cfg.width)
				}
				return d
			}
			if !r.Valid() { // a peek at an absent key: its window is empty
				return emptyDecision(n, limit)
			}
		} else {
			limit = e.limit
			if e.perKey {
				limit = e.geo.Limit(r)
			}
		}
		var res ringslot.Result
		if n >= 1 && n <= limit {
			res = e.geo.Acquire(r, t, n, limit)
		} else {
			res = e.geo.Peek(r, t, n, limit)
		}
		if res.Dead {
			// Retired by idleness or the sweeper: the key starts fresh.
			if n < 1 || n > limit {
				return emptyDecision(n, limit) // a peek creates nothing
			}
			r, ok = e.replace(h, key, r, t)
			continue
		}
		d := Decision{Allowed: res.Allowed, Limit: limit, Remaining: res.Remaining, RetryAfter: time.Duration(res.RetryAfter)}
		switch {
		case n == 0: // even where a clamped time puts the estimate over the limit
			d.Allowed, d.RetryAfter = true, 0
		case n < 0:
			d.Allowed, d.Reason, d.RetryAfter = false, ReasonInvalidN, Never
		case n > limit:
			d.Reason = ReasonTooLarge
		case !res.Allowed:
			d.Reason = ReasonLimited
		}
		return d
	}
}

func emptyDecision(n, limit int64) Decision {
	switch {
	case n < 0:
		return Decision{Reason: ReasonInvalidN, Limit: limit, Remaining: limit, RetryAfter: Never}
	case n > limit:
		return Decision{Reason: ReasonTooLarge, Limit: limit, Remaining: limit, RetryAfter: Never}
	}
	return Decision{Allowed: true, Limit: limit, Remaining: limit}
}

// limitFor resolves a new key's limit.
func (e *Engine) limitFor(key string) (int64, Reason) {
	if e.keyLimit == nil {
		return e.limit, ReasonOK
	}
	l := e.keyLimit(key)
	if l == 0 {
		return e.limit, ReasonOK
	}
	if l < 1 || l > MaxLimit {
		return e.limit, ReasonInvalidLimit
	}
	return l, ReasonOK
}

// create handles a key that was absent at lookup. A request that would
// record nothing (n outside 1 … limit) does not create the key and returns
// an invalid Ring; otherwise it returns the key's ring, whoever created it.
// Kept out of decide so that its closure never costs the hot path.
//
//go:noinline
func (e *Engine) create(h uint64, key string, n, t int64) (ringslot.Ring, int64, Reason) {
	limit, reason := e.limitFor(key)
	if reason != ReasonOK {
		return ringslot.Ring{}, limit, reason
	}
	if n < 1 || n > limit {
		if r, ok := e.tab.Load(h, key); ok { // created meanwhile
			return r, e.ringLimit(r), ReasonOK
		}
		return ringslot.Ring{}, limit, ReasonOK
	}
	r, err := e.tab.LoadOrCreate(h, key, func() ringslot.Ring { return e.geo.New(t, limit) })
	if err != nil {
		return ringslot.Ring{}, limit, ReasonKeysFull
	}
	return r, e.ringLimit(r), ReasonOK
}

func (e *Engine) ringLimit(r ringslot.Ring) int64 {
	if e.perKey {
		return e.geo.Limit(r)
	}
	return e.limit
}

// replace swaps a retired ring for a fresh one. It reports ok=false when the
// key is absent afterwards (MaxKeys refused it, or a peek found nothing),
// so that decide goes through create.
//
//go:noinline
func (e *Engine) replace(h uint64, key string, old ringslot.Ring, t int64) (ringslot.Ring, bool) {
	limit, reason := e.limitFor(key)
	if reason != ReasonOK {
		return ringslot.Ring{}, false
	}
	r, err := e.tab.Replace(h, key, old, func() ringslot.Ring { return e.geo.New(t, limit) })
	if err != nil {
		return ringslot.Ring{}, false
	}
	return r, true
}

// SetLimit sets key's own limit, creating the key's state if it has none,
// and keeps its counts. It needs Config.PerKeyLimits or Config.KeyLimit. A
// lower limit applies from the next decision; units already admitted stay.
// The override lasts until the key is reclaimed after being idle for longer
// than Window plus one sub-window; after that Config.KeyLimit (or Limit)
// applies again, so durable per-tenant limits belong in KeyLimit.
func (e *Engine) SetLimit(key string, limit int64) error {
	if !e.perKey {
		return fmt.Errorf("ringlimit: SetLimit needs Config.PerKeyLimits or Config.KeyLimit")
	}
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("ringlimit: SetLimit limit = %d, want 1 … %d", limit, int64(MaxLimit))
	}
	h := e.tab.Hash(key)
	t := e.clk.UnixNano()
	fresh := func() ringslot.Ring { return e.geo.New(t, limit) }
	r, err := e.tab.LoadOrCreate(h, key, fresh)
	for err == nil {
		e.geo.SetLimit(r, limit)
		if !e.geo.Retired(r) {
			return nil
		}
		r, err = e.tab.Replace(h, key, r, fresh)
	}
	return fmt.Errorf("ringlimit: SetLimit(%q): %w", key, err)
}

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
// Close, but idle keys are no longer reclaimed and a coarse clock no longer
// advances.
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
