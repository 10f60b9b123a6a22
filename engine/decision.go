package engine

import (
	"math"
	"time"
)

// Never is the RetryAfter of a request that can never be admitted as asked:
// n larger than the key's limit, n < 0, a time before 1970, a limit from
// Config.KeyLimit outside 1 … MaxLimit (1 … Config.MaxLogLimit with
// SlidingLog), or a key longer than Config.MaxKeyBytes.
const Never = time.Duration(math.MaxInt64)

// Decision is the outcome of one request. It has four fields, so that the
// compiler keeps it in registers on the decision path; Reason derives the
// kind of outcome from them.
type Decision struct {
	// Allowed reports whether the n units were admitted (and recorded).
	Allowed bool
	// Limit is the key's limit; with TokenBucket, the Burst (the most
	// units one request can take).
	Limit int64
	// Remaining is the number of units that would still be admitted now,
	// after this decision.
	Remaining int64
	// RetryAfter, on denial, is the least wait after which this same
	// request fits if no other traffic arrives for the key; Never when it
	// never can (also when the wait would end past 2262-04-11, the last
	// representable time). It is 0 when Allowed. It counts from the
	// request's own now, also when now was older than the key's newest
	// time and the decision was made there. Under concurrent traffic on
	// the key it is advisory.
	RetryAfter time.Duration
}

// Reason classifies a Decision.
type Reason uint8

const (
	// ReasonOK: admitted (or n was 0).
	ReasonOK Reason = iota
	// ReasonLimited: the key's window has no room for n units now;
	// RetryAfter says when it will.
	ReasonLimited
	// ReasonNever: the request can never be admitted as asked (n > Limit,
	// n < 0, a time before 1970, or a bad KeyLimit result); RetryAfter is
	// Never. The caller tells these apart by its own n and time.
	ReasonNever
	// ReasonKeysFull: the key is new, and Config.MaxKeys keys are held.
	// Remaining is the full Limit (the key has used nothing) and
	// RetryAfter is a hint: how long a key that gets no more requests
	// takes to become reclaimable, Window plus two sub-windows
	// (FixedWindow: 3·Window; SlidingLog: Window; TokenBucket: the time
	// to refill from empty, Burst·Window/Limit), not counting the
	// sweeper's period.
	ReasonKeysFull
	// ReasonKeyTooLong: the key is longer than Config.MaxKeyBytes, so
	// the engine refuses to hold it: nothing was stored. Limit and
	// Remaining are 0 (no unit is ever admitted for such a key) and
	// RetryAfter is Never. A limit is at least 1 in every other
	// Decision an Engine returns, so Limit 0 with RetryAfter Never marks
	// this reason; a Limiter of another backend that refuses a key for
	// its length returns the same Decision.
	ReasonKeyTooLong
)

var reasonNames = [...]string{"ok", "limited", "never", "keys-full", "key-too-long"}

// String returns the reason's name: ok, limited, never, keys-full or
// key-too-long.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// keyTooLong is the Decision on a key longer than Config.MaxKeyBytes.
var keyTooLong = Decision{RetryAfter: Never}

// Reason reports why d came out as it did. A limited denial always has
// Remaining < Limit (it asked for more than Remaining, and at most Limit),
// so a denial with the full Limit remaining can only be MaxKeys.
func (d Decision) Reason() Reason {
	switch {
	case d.Allowed:
		return ReasonOK
	case d.RetryAfter == Never:
		if d.Limit == 0 {
			return ReasonKeyTooLong
		}
		return ReasonNever
	case d.Remaining >= d.Limit:
		return ReasonKeysFull
	}
	return ReasonLimited
}
