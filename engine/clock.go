package engine

import (
	"time"

	"github.com/ringlimit/ringlimit/internal/clock"
)

// Clock is a time source in Unix nanoseconds: Config.Clock. It must be safe
// for concurrent use, and should never go backwards (a reading older than
// a key's newest is treated as that newest, see AllowAt). A reading before
// 1970 or past 2262-04-11 (negative) makes every decision that uses it
// refuse with RetryAfter Never.
type Clock interface {
	// UnixNano returns the current time as nanoseconds since the Unix
	// epoch.
	UnixNano() int64
}

// ManualClock is a Clock that moves only when told to, for tests and
// simulations. It is also a WaitClock: Wait sleeps on it, and Set and
// Advance end the waits they reach, so a test moves waiters
// deterministically. It is safe for concurrent use. Create it with
// NewManualClock (the zero ManualClock is not usable).
type ManualClock struct {
	m *clock.Manual
}

// NewManualClock returns a ManualClock reading t. A t before 1970 or past
// 2262-04-11 reads as −1, which the engine refuses.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{m: clock.NewManual(t)} }

// UnixNano returns the clock's reading in Unix nanoseconds (Clock).
func (c *ManualClock) UnixNano() int64 { return c.m.UnixNano() }

// Set moves the clock to t (to −1 when t is before 1970 or past
// 2262-04-11), and ends every wait whose end it reaches.
func (c *ManualClock) Set(t time.Time) { c.m.Set(t) }

// Advance moves the clock by d (backwards for d < 0), and ends every wait
// whose end it reaches.
func (c *ManualClock) Advance(d time.Duration) { c.m.Advance(d) }

// After returns a channel that is closed once the clock reads at least its
// reading at the call plus d (at once for d ≤ 0), and a function that
// releases the wait early; stop is idempotent (WaitClock). A wait
// registered while another goroutine moves the clock is not missed.
func (c *ManualClock) After(d time.Duration) (ch <-chan struct{}, stop func()) { return c.m.After(d) }

// Waits returns the number of pending waits (After calls neither ended nor
// stopped): a test moves the clock once it knows a waiter is asleep.
func (c *ManualClock) Waits() int { return c.m.Waits() }
