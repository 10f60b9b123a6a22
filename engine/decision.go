package engine

import (
	"math"
	"time"
)

// Never is the RetryAfter of a request that can never be admitted: n larger
// than the key's limit, n < 0, or another permanent refusal.
const Never = time.Duration(math.MaxInt64)

// Reason says why a Decision came out as it did.
type Reason uint8

const (
	// ReasonOK: the request was admitted (or n was 0).
	ReasonOK Reason = iota
	// ReasonLimited: the key's window has no room for n units now;
	// RetryAfter says when it will.
	ReasonLimited
	// ReasonTooLarge: n exceeds the key's limit, so it can never fit;
	// RetryAfter is Never.
	ReasonTooLarge
	// ReasonInvalidN: n < 0. Nothing is refunded; RetryAfter is Never.
	ReasonInvalidN
	// ReasonKeysFull: the key is new and Config.MaxKeys keys are held.
	// RetryAfter is a hint: the time until the oldest possible idle key
	// can be reclaimed (Window plus one sub-window).
	ReasonKeysFull
	// ReasonInvalidTime: the time is before 1970-01-01 UTC or outside
	// time.Time.UnixNano's range. RetryAfter is Never.
	ReasonInvalidTime
	// ReasonInvalidLimit: Config.KeyLimit returned a limit outside
	// 1 … MaxLimit for a new key; the key is not created. RetryAfter is
	// Never.
	ReasonInvalidLimit
)

var reasonNames = [...]string{"ok", "limited", "too-large", "invalid-n", "keys-full", "invalid-time", "invalid-limit"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[int(r)]
	}
	return "unknown"
}

// Decision is the outcome of one request.
type Decision struct {
	// Allowed reports whether the n units were admitted (and recorded).
	Allowed bool
	// Reason says why; ReasonOK when Allowed.
	Reason Reason
	// Limit is the key's limit.
	Limit int64
	// Remaining is the number of units that would still be admitted now,
	// after this decision.
	Remaining int64
	// RetryAfter, on denial, is the least wait after which this same
	// request fits if no other traffic arrives for the key; Never when it
	// never can. It is 0 when Allowed. Under concurrent traffic on the key
	// it is advisory.
	RetryAfter time.Duration
}
