package adapter

import (
	"strconv"

	"github.com/ringlimit/ringlimit/engine"
)

// MaxKeyBytes is the longest key either adapter passes to a limiter, in
// bytes. A key function's result (a header or metadata value, a composite,
// a custom function's) above it is refused with 400 / InvalidArgument,
// never truncated, since a cut key could merge two clients. The engine
// keeps a key's string for the key's life, and a shared limiter stores it
// in Redis: without a bound, distinct huge values are a memory denial of
// service. httplimit.MaxKeyBytes and grpclimit.MaxKeyBytes are this value.
const MaxKeyBytes = 256

// KeyTooLong returns the message of a key of n > MaxKeyBytes bytes,
// after prefix ("httplimit: ", "grpclimit: ").
func KeyTooLong(prefix string, n int) string {
	return prefix + "the key is " + strconv.Itoa(n) + " bytes, above the cap of " +
		strconv.Itoa(MaxKeyBytes) + " bytes (MaxKeyBytes); refused, never truncated"
}

// Outcome is what an adapter does with a Decision that came without an
// error. Every adapter classifies its decisions here, so that a new
// engine.Reason is mapped once for all of them.
type Outcome uint8

const (
	Admitted      Outcome = iota // run the handler
	Limited                      // 429 / ResourceExhausted, with the wait
	KeysFull                     // 503 / Unavailable: a new key, and MaxKeys keys held
	TooCostly                    // 413 / FailedPrecondition: n above the key's limit, it can never fit
	KeyRefused                   // 400 / InvalidArgument: the engine refused the key itself (too long)
	Misconfigured                // 500 / Internal: a limit the engine rejected, a bad cost
)

// Classify returns the Outcome of d, a Decision for n units.
func Classify(d engine.Decision, n int64) Outcome {
	switch d.Reason() {
	case engine.ReasonOK:
		return Admitted
	case engine.ReasonLimited:
		return Limited
	case engine.ReasonKeysFull:
		return KeysFull
	case engine.ReasonKeyTooLong:
		return KeyRefused
	}
	if n > d.Limit && d.Limit > 0 {
		return TooCostly
	}
	return Misconfigured
}

// Refusal reports whether o is a limiter's refusal, which WithDryRun
// counts as a would-deny and lets through: Limited, KeysFull or TooCostly.
func (o Outcome) Refusal() bool { return o == Limited || o == KeysFull || o == TooCostly }
