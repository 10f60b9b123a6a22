package engine

import (
	"time"

	"github.com/ringlimit/ringlimit/internal/clock"
	"github.com/ringlimit/ringlimit/ringslot"
)

// Reservation is the outcome of ReserveAt: a Decision that can be taken
// back or settled. When it was Allowed, Cancel returns its units to the
// sub-window they were recorded in, and Settle adjusts them to what the
// work used (docs/design.md §3b).
//
// A Reservation is a value (112 bytes on 64-bit platforms), and copies of
// it are safe: every copy (an assignment, a range loop's variable, append,
// a channel send) shares one claim on the units, and Cancel or Settle on
// any of them acts at most once, whichever copy and however many calls.
// Cancel, Settle and Decision are safe for concurrent use, on one value or
// on copies.
//
// It keeps the key string it was given (Key), and the key's state, until
// it is dropped. The zero Reservation is a denied one with nothing to
// cancel.
type Reservation struct {
	d     Decision
	e     *Engine
	key   string
	ring  ringslot.Ring
	at    int64 // the effective epoch (SlidingLog: time, ns) the units were recorded at
	n     int64 // units recorded; 0 when nothing was (denied, or n = 0)
	audit int64 // for a key the self-audit samples: the time its log recorded the units at, plus one; else 0
	// auditID names the admission in the self-audit's log (0: unknown).
	auditID uint64
	// claim is the word every copy shares (claim.go): 0 until a Cancel
	// or a Settle claims the units, then 1. nil for AllowAll's own
	// reservations, which are never copied and claim through state instead.
	claim *uint32
	state uint32 // atomic, when claim is nil: 0 until Cancel claims the units, then 1
}

// ReserveAt is AllowAt that can be taken back: it decides and records
// exactly as AllowAt(key, n, now) does, and when the Decision is Allowed
// (with n ≥ 1), Cancel returns the n units.
//
// It allocates nothing per call for a key the engine holds: an admission
// takes the claim its copies share from a 4 KiB chunk that the engine
// allocates once per 1,023 admissions.
func (e *Engine) ReserveAt(key string, n int64, now time.Time) (r Reservation) {
	e.reserve(&r, key, n, clock.UnixNano(now), true)
	return // a bare return: the Reservation is built in place, not copied
}

// Reserve is shorthand for ReserveAt(key, n, now) with now from the
// engine's clock.
func (e *Engine) Reserve(key string, n int64) (r Reservation) {
	e.reserve(&r, key, n, e.now(), true)
	return
}

// reserve is ReserveAt at t (Unix ns, −1 when out of range), into *out,
// a zero Reservation. The fast path is fast's, keeping the ring. With
// shared, an admission gets a claim its copies share (claim.go); without,
// for AllowAll's reservations, which never leave it, none.
func (e *Engine) reserve(out *Reservation, key string, n, t int64, shared bool) {
	out.e, out.key = e, key
	if t >= 0 && n >= 1 && len(key) <= e.cfg.maxKey {
		h := e.tab.Hash(key)
		if r, found := e.tab.Load(h, key); found {
			if limit := e.ringLimit(r); n <= limit {
				if res := e.geo.Acquire(r, t, n, limit); !res.Dead {
					out.d = decision(res, limit)
					if res.Allowed {
						out.ring, out.at, out.n = r, res.Epoch, n
						if shared {
							out.claim = e.claim(h)
						}
					}
					if e.sampled(h) { // Config.Audit's one branch, as in fast
						out.audit, out.auditID = e.auditReserve(key, t, n, limit, res)
					}
					return
				}
			}
		}
	}
	d, r, at, aid := e.decideRing(key, n, t) // audits the decision itself
	out.d = d
	if d.Allowed && n >= 1 && r.Valid() {
		out.ring, out.at, out.n = r, at, n
		h := e.tab.Hash(key)
		if shared {
			out.claim = e.claim(h)
		}
		if e.audit != nil && e.sampled(h) {
			out.audit, out.auditID = e.effective(t, at)+1, aid
		}
	}
}

// Decision returns the decision the Reservation was made with: Allowed,
// Limit, and Remaining and RetryAfter as of that decision. Cancel and
// Settle do not change it.
func (r *Reservation) Decision() Decision { return r.d }

// Key returns the key the Reservation was made for.
func (r *Reservation) Key() string { return r.key }

// Units returns the units the Reservation recorded: n when it was Allowed
// with n ≥ 1, otherwise 0. Cancel and Settle do not change it.
func (r *Reservation) Units() int64 { return r.n }

// At returns where the units were recorded: the start of the sub-window
// (FixedWindow: the window) they count in, or with SlidingLog their exact
// time. It is the caller's now, or the key's newest time when now was
// older. With TokenBucket it is the instant, rounded down to a ns, from
// which the units were taken: the later of now and the key's theoretical
// arrival time before them. It is the zero Time when nothing was recorded.
func (r *Reservation) At() time.Time {
	if r.n == 0 {
		return time.Time{}
	}
	if r.e.geo.IsLog() {
		return time.Unix(0, r.at)
	}
	if r.e.geo.IsBucket() {
		return time.Unix(0, r.e.geo.BookedAt(r.ring, r.at, r.n))
	}
	return time.Unix(0, r.at*r.e.cfg.width)
}

// Cancel returns the Reservation's units to the sub-window they were
// recorded in, and reports whether it did. It returns false, and changes
// nothing, when:
//   - the Reservation recorded nothing: it was denied, or n was 0 (a peek);
//   - Cancel or Settle was called on it, or on a copy of it, before
//     (Cancel is idempotent across copies, also when called concurrently:
//     one call returns the units, the others report false);
//   - the sub-window has left the key's window: the key has seen a request
//     that late or later (SlidingWindow and SlidingWindowStrict: N+1
//     sub-windows after it, since the window at sub-window e+N still counts
//     e's units; FixedWindow: the next window; SlidingLog: Window after the
//     recorded time), so the units no longer count anywhere. The slot may hold a
//     newer sub-window by then, and is never touched;
//   - the key's state was reclaimed after being idle, retired and
//     replaced, or Reset (SlidingLog: a log SetLimit only moved into a
//     larger allocation is followed, and the units returned there).
//
// "The key's window" is the window at the newest time the key has seen,
// not at the engine's clock. A count never goes below zero, and no other
// reservation's units are touched. Under concurrency a Cancel can make a
// concurrent request be refused falsely, never admitted falsely
// (docs/design.md §3b). It does not wake Wait.
//
// With TokenBucket, Cancel gives the units back only while they are the
// key's newest booking; otherwise it reports false and the units stay
// taken (returning them from under a later admission could admit more
// than the bucket holds; docs/design.md §11).
func (r *Reservation) Cancel() bool {
	if r.n == 0 || !r.take() {
		return false
	}
	return r.giveBack(r.n)
}

// cancel returns n units recorded at effective epoch at on ring, the state
// of key at the time.
func (e *Engine) cancel(key string, ring ringslot.Ring, at, n int64) bool {
	ok, dead := e.geo.Cancel(ring, at, n)
	if !dead || !e.geo.IsLog() {
		return ok
	}
	// A retired log: either reclaimed (its replacement starts after every
	// unit of it has left the window, so holds no unit stamped at and
	// cancels nothing), or grown by SetLimit into a new ring with the same
	// timestamps. Follow it; a grown ring can itself be grown again. The
	// lookup takes the key's bucket lock: Grow retires the old ring inside
	// the table's Swap, before it installs the new one, so a lock-free
	// Load could still return the ring just retired (found by
	// TestCancelRacesLogGrowth). Under the lock the table holds the new
	// ring, or the retired one only if it was reclaimed, not moved.
	h := e.tab.Hash(key)
	for {
		next, found := e.tab.LoadLocked(h, key)
		if !found || next == ring {
			return false
		}
		ring = next
		if ok, dead = e.geo.Cancel(ring, at, n); !dead {
			return ok
		}
	}
}

// Request is one part of an AllowAll decision: N units of Key on Engine.
type Request struct {
	Engine *Engine
	Key    string
	N      int64
}

// AllowAll admits every request or none, at now: each request is reserved
// in order (ReserveAt), and on the first denial the earlier ones are
// cancelled. It returns the index of the denying request and its Decision,
// or, when every request was admitted, −1 and the admitted Decision with
// the least Remaining (the first of equals): the limit closest to refusing,
// what a caller reports as its remaining quota. With no requests it returns
// −1 and a zero Decision with Allowed set.
//
// A request with a nil Engine is refused with RetryAfter Never and Limit
// −1 (ReasonNever), like a request that can never fit. The requests may
// name one engine and key more than once; each is reserved on its own, so their units add up, and a
// denial's RetryAfter counts the earlier ones' units that are then given
// back: requests on one key that can never fit together are not refused
// with Never. Keys that the earlier requests created stay, empty, after a
// refusal, until swept; they take MaxKeys room as any key does.
//
// The units given back are returned as Cancel returns them; a request on
// one of the keys racing an AllowAll can be refused falsely, never
// admitted falsely. If a request panics (a Config.KeyLimit that panics), the requests
// reserved before it are cancelled as the panic unwinds: the panic goes
// on, and nothing is consumed.
//
// It allocates nothing when every key exists and there are at most
// 8 requests: reqs is the caller's slice, and the
// reservations live in an array on the stack. More requests take one
// slice of Reservations from the heap; any number is decided.
func AllowAll(now time.Time, reqs ...Request) (int, Decision) {
	t := clock.UnixNano(now)
	var stack [allowAllStack]Reservation
	held := stack[:]
	if len(reqs) > len(stack) {
		held = make([]Reservation, len(reqs))
	}
	// kept counts the reservations admitted so far, held[:kept]. Until
	// every request is admitted they are given back, on a denial and on a
	// panic alike, newest first.
	kept := 0
	defer func() {
		for j := kept - 1; j >= 0; j-- {
			held[j].Cancel()
		}
	}()
	best := Decision{Allowed: true}
	for k := range reqs {
		q := &reqs[k]
		if q.Engine == nil {
			return k, Decision{Limit: -1, RetryAfter: Never} // Limit −1: no engine, hence no limit (0 would read as ReasonKeyTooLong)
		}
		r := &held[k]
		q.Engine.reserve(r, q.Key, q.N, t, false)
		if !r.d.Allowed {
			return k, r.d
		}
		if k == 0 || r.d.Remaining < best.Remaining {
			best = r.d
		}
		kept = k + 1
	}
	kept = 0 // all admitted: every reservation stands
	return -1, best
}

// allowAllStack is how many of AllowAll's reservations live on its stack.
const allowAllStack = 8
