package ringslot

// Result is the outcome of one decision on a ring.
//
// It has four fields, Verdict counting as one: the compiler keeps a struct
// of at most four fields in registers, and a fifth turned every return of a
// Result into a copy through the stack, with a store-forwarding stall in
// each frame of the decision path (about a quarter of a hot key's time).
// result_test.go pins the count.
type Result struct {
	Verdict
	Remaining  int64 // units that would still be admitted now
	RetryAfter int64 // ns; 0 when allowed, Never when the request can never fit
	// Epoch is the effective epoch of the decision (a log: the effective
	// time, ns): t's, or the key's newest if t was older. Acquire and Peek
	// set it, Admit does not.
	Epoch int64
}

// Verdict is what a decision did.
type Verdict struct {
	Allowed bool
	Dead    bool // no decision was made on this ring: reload the key's ring (and limit) and retry
	// Stale, always with Dead: the ring is live, but its limit was lowered
	// below the caller's, or changed more than once, while the decision ran
	// (Acquire); nothing was recorded. Reload the limit and retry on the
	// same ring; do not replace it.
	Stale bool
}
