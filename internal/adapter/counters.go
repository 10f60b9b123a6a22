package adapter

import "sync/atomic"

// CacheLine is the padding between the hot counters: 64 bytes is the
// cache line of amd64 and of most arm64 cores, so two counters bumped by
// different requests never share a line.
const CacheLine = 64

// Counts are the decision counters of a middleware or an interceptor, as
// httplimit.Stats and grpclimit.Stats spell them (the same fields in the
// same order, so that each converts to Counts).
type Counts = struct {
	Allowed   uint64
	Denied    uint64
	Rejected  uint64
	Errors    uint64
	Canceled  uint64
	WouldDeny uint64
	// SettleErrors: requests whose held units (WithInFlight, WithSettle)
	// the limiter would not give back or settle after the handler, each
	// counted once however many of its policies failed.
	SettleErrors uint64
}

// Counters are the live Counts, each on its own cache line. The zero
// Counters is ready; it must not be copied after first use.
type Counters struct {
	_            [CacheLine]byte
	Allowed      atomic.Uint64
	_            [CacheLine - 8]byte
	Denied       atomic.Uint64
	_            [CacheLine - 8]byte
	Rejected     atomic.Uint64
	_            [CacheLine - 8]byte
	Errors       atomic.Uint64
	_            [CacheLine - 8]byte
	Canceled     atomic.Uint64
	_            [CacheLine - 8]byte
	WouldDeny    atomic.Uint64
	_            [CacheLine - 8]byte
	SettleErrors atomic.Uint64
	_            [CacheLine - 8]byte
}

// Load reads the counters one by one: a snapshot taken under load may
// count a decision in none of them yet; it never counts one twice.
func (c *Counters) Load() Counts {
	return Counts{
		Allowed: c.Allowed.Load(), Denied: c.Denied.Load(), Rejected: c.Rejected.Load(),
		Errors: c.Errors.Load(), Canceled: c.Canceled.Load(), WouldDeny: c.WouldDeny.Load(),
		SettleErrors: c.SettleErrors.Load(),
	}
}
