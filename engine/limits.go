package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/internal/clock"
	"github.com/ringlimit/ringlimit/ringslot"
	"github.com/ringlimit/ringlimit/shard"
)

// SetLimit is SetLimitAt(key, limit, now) with now from the engine's clock.
// It creates a key's state at the clock's time: when you drive AllowAt with
// a timeline of your own, use SetLimitAt with a time on that timeline.
func (e *Engine) SetLimit(key string, limit int64) error {
	return e.setLimit("SetLimit", key, limit, e.clk.UnixNano())
}

// SetLimitAt sets key's own limit, creating the key's state at now if it
// has none, and keeps its counts. It needs Config.PerKeyLimits or
// Config.KeyLimit (a TokenBucket engine refuses both). The change is
// linearizable with the key's decisions, also those in flight: each
// admission fits the limit in force when it is made; a decision in flight
// when the limit is raised may still be refused under the old one. Setting
// a limit is activity at now: the key's time moves to now (never
// backwards). The override lasts until the key is reclaimed when idle (or
// retired by a request 2^21 or more sub-windows after its newest one);
// then Config.KeyLimit (or Limit) applies again, so durable per-tenant
// limits belong in KeyLimit.
//
// Errors change nothing: a limit outside 1 … MaxLimit (SlidingLog: 1 …
// Config.MaxLogLimit), a now outside 1970 … 2262-04-11, a key longer
// than Config.MaxKeyBytes, and a new key while Config.MaxKeys keys are
// held (wrapping ErrKeysFull). With SlidingLog a limit above the one the
// key's log was allocated for moves the log into a larger allocation,
// under the key's map bucket lock.
func (e *Engine) SetLimitAt(key string, limit int64, now time.Time) error {
	return e.setLimit("SetLimitAt", key, limit, clock.UnixNano(now))
}

// setLimit is SetLimitAt at t (Unix ns, or −1 when out of range).
func (e *Engine) setLimit(what, key string, limit, t int64) error {
	if err := e.checkLimit(what, key, limit, t); err != nil {
		return err
	}
	h := e.tab.Hash(key)
	fresh := e.freshAt(t, limit)
	r, err := e.tab.LoadOrCreate(h, key, fresh)
	for err == nil {
		// Setting a limit at t is activity at t: the key's time moves
		// there, so that a request at t right after does not find the key
		// idle for the revive gap and replace it, limit and all.
		e.geo.Touch(r, t)
		if e.geo.SetLimit(r, limit) {
			return nil
		}
		if e.geo.Retired(r) {
			r, err = e.tab.Replace(h, key, r, fresh)
			continue
		}
		// A log too small for limit. Grow it under the key's bucket lock,
		// so that no writer replaces it with an empty ring meanwhile.
		old := r
		var ok bool
		grow := func() ringslot.Ring { nr, _ := e.geo.Grow(old, limit); return nr } // old if retired: replaced next round
		if r, ok = e.tab.Swap(h, key, old, grow); !ok {
			r, err = e.tab.LoadOrCreate(h, key, fresh) // reclaimed meanwhile
		}
	}
	if errors.Is(err, shard.ErrFull) {
		return fmt.Errorf("ringlimit: %s(%q): %w (%w)", what, key, ErrKeysFull, err)
	}
	return fmt.Errorf("ringlimit: %s(%q): %w", what, key, err)
}

// checkLimit validates what SetLimit, SetLimitAt and UpdateLimits are given
// (UpdateLimits creates nothing, so it passes t = 0).
func (e *Engine) checkLimit(what, key string, limit, t int64) error {
	if !e.perKey {
		return fmt.Errorf("ringlimit: %s needs Config.PerKeyLimits or Config.KeyLimit", what)
	}
	if len(key) > e.cfg.maxKey {
		// The key itself is not quoted: it is long, and may be anyone's.
		return fmt.Errorf("ringlimit: %s: the key is %d bytes, longer than Config.MaxKeyBytes = %d; nothing was changed", what, len(key), e.cfg.maxKey)
	}
	if limit < 1 || limit > e.maxLimit {
		return e.cfg.limitError(what+" limit", limit)
	}
	if t < 0 {
		return fmt.Errorf("ringlimit: %s(%q): the time is before 1970 or after 2262-04-11 (a Clock or now outside int64 Unix nanoseconds); nothing was changed", what, key)
	}
	return nil
}

// UpdateLimits calls fn for every key held, with its current limit, and
// sets the limit fn returns (0 keeps it), keeping every key's counts: the
// way to apply a new per-tenant limit to live keys, while Config.KeyLimit
// applies it to keys created from now on. It needs Config.PerKeyLimits or
// Config.KeyLimit. It is not a snapshot, and it applies fn's answer only to
// the state fn was shown: a key reclaimed meanwhile is not created again,
// and a key whose state was replaced or created meanwhile keeps the limit
// KeyLimit gave it. Each limit it sets is linearizable with the key's
// decisions, as SetLimitAt's is. Unlike SetLimitAt, it does not count as
// the keys' activity: a key idle long enough is reclaimed as before, and
// its next request starts at Config.KeyLimit's answer, which is why a
// durable limit belongs in KeyLimit (as httplimit's Tiers.Swap does
// both). It returns the first error SetLimit would return for a limit out
// of range, after visiting every key.
func (e *Engine) UpdateLimits(fn func(key string, limit int64) int64) error {
	if !e.perKey {
		return fmt.Errorf("ringlimit: UpdateLimits needs Config.PerKeyLimits or Config.KeyLimit")
	}
	var first error
	e.tab.Range(func(key string, r ringslot.Ring) bool {
		cur := e.geo.Limit(r)
		next := fn(key, cur)
		if next == 0 || next == cur {
			return true
		}
		if err := e.updateLimit(key, r, next); err != nil && first == nil {
			first = err
		}
		return true
	})
	return first
}

// updateLimit sets limit on r, the state UpdateLimits visited for key, and
// on nothing else: not on a state that replaced r, nor on one it creates.
func (e *Engine) updateLimit(key string, r ringslot.Ring, limit int64) error {
	if err := e.checkLimit("UpdateLimits", key, limit, 0); err != nil {
		return err
	}
	if e.geo.SetLimit(r, limit) || e.geo.Retired(r) {
		return nil // set, or r is being reclaimed or replaced: its successor gets KeyLimit
	}
	// A log too small for limit: grow r itself, with the limit, under the
	// key's bucket lock and only while r is still the key's state and live
	// (a retired r stays, for the sweep to remove).
	e.tab.Swap(e.tab.Hash(key), key, r, func() ringslot.Ring { nr, _ := e.geo.Grow(r, limit); return nr })
	return nil
}
