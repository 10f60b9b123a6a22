package engine

import (
	"github.com/ringlimit/ringlimit/ringslot"
	"github.com/ringlimit/ringlimit/shard"
)

// refusal is why a key's state could not be created.
type refusal uint8

const (
	refusedNone     refusal = iota
	refusedLimit            // KeyLimit returned a value outside 1 … maxLimit
	refusedKeysFull         // MaxKeys
)

// limitFor resolves a new key's limit.
func (e *Engine) limitFor(key string) (int64, refusal) {
	if e.keyLimit == nil {
		return e.limit, refusedNone
	}
	l := e.keyLimit(key)
	if l == 0 {
		return e.limit, refusedNone
	}
	if l < 1 || l > e.maxLimit {
		return e.limit, refusedLimit
	}
	return l, refusedNone
}

// create handles a key that was absent at lookup. A request that would
// record nothing (n outside 1 … limit) does not create the key and returns
// an invalid Ring; otherwise it returns the key's ring, whoever created it.
// Kept out of decide so that its closure never costs the hot path.
//
//go:noinline
func (e *Engine) create(h uint64, key string, n, t int64) (ringslot.Ring, int64, refusal) {
	limit, err := e.limitFor(key)
	if err != refusedNone {
		return ringslot.Ring{}, limit, err
	}
	if n < 1 || n > limit {
		if r, ok := e.tab.Load(h, key); ok { // created meanwhile
			return r, e.ringLimit(r), refusedNone
		}
		return ringslot.Ring{}, limit, refusedNone
	}
	r, terr := e.tab.LoadOrCreate(h, key, e.freshAt(t, limit))
	if terr != nil {
		return ringslot.Ring{}, limit, refusedKeysFull
	}
	return r, e.ringLimit(r), refusedNone
}

func (e *Engine) ringLimit(r ringslot.Ring) int64 {
	if e.perKey {
		return e.geo.Limit(r)
	}
	return e.limit
}

// replace swaps a retired ring for a fresh one. It reports ok=false when
// there is no ring to use (MaxKeys or KeyLimit refused the key), so that
// decideSlow goes through create, which refuses the request.
//
//go:noinline
func (e *Engine) replace(h uint64, key string, old ringslot.Ring, t int64) (ringslot.Ring, bool) {
	limit, why := e.limitFor(key)
	if why != refusedNone {
		// old stays retired in the table: the next writer for the key
		// replaces it, or a sweep removes it once the clock reaches its
		// retirement time. Removing it here would raise the table's floor
		// to a time this caller chose, possibly far past the clock.
		return ringslot.Ring{}, false
	}
	if r, moved := e.moveBucket(h, key, old, t); moved {
		return r, true
	}
	fresh := e.freshAt(t, limit)
	if e.geo.IsBucket() {
		// Reclaimed meanwhile (moveBucket found no key): it was full,
		// and starts afresh at the table's floor.
		r, err := e.tab.LoadOrCreate(h, key, fresh)
		return r, err == nil
	}
	r, err := e.tab.Replace(h, key, old, fresh)
	if err != nil {
		return ringslot.Ring{}, false
	}
	return r, true
}

// freshAt returns the constructor of a key's new ring for a writer at t: it
// starts at t or at the floor the table gives, whichever is later. The
// floor is at or after the retirement time of the state the key had, where
// every old count is outside the window, and a writer whose t is older is
// clamped forward to it, so no count still inside some writer's window is
// dropped (docs/design.md §5).
func (e *Engine) freshAt(t, limit int64) shard.Fresh {
	return func(floor int64, _ string) (int64, int64) { return max(t, floor), limit }
}
