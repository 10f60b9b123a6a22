package engine

import "sync/atomic"

// A claim is the one word every copy of a Reservation shares: Cancel
// returns the units only after a CAS of the claim from 0 to 1, so of any
// number of copies (assignment, a range loop, append, a channel) and calls
// at most one gives the units back. A Reservation is a value (Reserve
// allocates nothing per call), so its claim cannot live in it: claims are
// carved out of 4 KiB chunks, 1,023 claims each, that the engine
// allocates as they run out, so an admitted Reserve costs an atomic add
// and, once per 1,023 admissions, a chunk. A chunk has no pointers (the GC
// never scans it) and lives while any Reservation points into it.
//
// Invariant: a claim is handed out once (its chunk's next counter only
// grows, and a chunk never becomes current again once replaced), so two
// admissions never share a claim; it starts at 0 and only ever moves to 1.

// claimsPerChunk is how many claims a chunk holds: with its counter, 4 KiB.
const claimsPerChunk = 1023

type claimChunk struct {
	next  atomic.Uint32 // the next claim to hand out; past the end: exhausted
	words [claimsPerChunk]uint32
}

// claimCursor is where claims are taken from; an engine keeps several,
// picked by the key's hash, padded so that reservations on keys of
// different cursors never write one cache line.
type claimCursor struct {
	cur atomic.Pointer[claimChunk]
	_   [cacheLine - 8]byte
}

// take hands out a fresh claim. Lock-free: the writer that finds the
// chunk exhausted installs a new one with a CAS; the losers use the
// winner's.
func (c *claimCursor) take() *uint32 {
	for {
		ch := c.cur.Load()
		if ch != nil {
			if i := ch.next.Add(1) - 1; i < claimsPerChunk {
				return &ch.words[i]
			}
		}
		nc := new(claimChunk)
		nc.next.Store(1) // words[0] is this writer's
		if c.cur.CompareAndSwap(ch, nc) {
			return &nc.words[0]
		}
	}
}

// newClaims returns the engine's claim cursors: a power of two, one per
// map shard, so that reservations spread over them as keys do over the
// shards.
func newClaims(shards int) []claimCursor { return make([]claimCursor, shards) }

// claim hands out a claim for an admission of the key of hash h.
func (e *Engine) claim(h uint64) *uint32 {
	return e.claims[h&uint64(len(e.claims)-1)].take()
}
