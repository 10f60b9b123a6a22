// Package clock provides the engine's time sources, all in Unix nanoseconds:
// a precise monotonic clock, an owned coarse clock, and a manual clock for
// tests.
package clock

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname
)

// Clock returns the current time as Unix nanoseconds.
type Clock interface {
	UnixNano() int64
}

// maxUnixSec is the last whole second whose start is representable in
// int64 Unix nanoseconds (2262-04-11T23:47:16Z); 0.85 s of it are.
const maxUnixSec = math.MaxInt64 / int64(time.Second)

// UnixNano returns t as Unix nanoseconds, or −1 when t is before 1970 or
// past int64 nanoseconds (2262-04-11T23:47:16.854775807Z). It judges t
// itself: t.UnixNano() of a year-1000 time wraps to a time in 2169.
func UnixNano(t time.Time) int64 {
	s := t.Unix()
	if s < 0 || s > maxUnixSec {
		return -1
	}
	// In range but for the tail of maxUnixSec, where the sum wraps
	// negative: still −1 to the caller's t < 0 test. (t.UnixNano would
	// decode t's seconds a second time.)
	if ns := s*int64(time.Second) + int64(t.Nanosecond()); ns >= 0 {
		return ns
	}
	return -1
}

// Monotonic reads wall time once, at creation, and adds the monotonic time
// elapsed since. An NTP step therefore cannot move it backwards or jump it
// forwards; it drifts from the wall clock only as much as the monotonic clock
// does. A reading is one call of the runtime's monotonic clock (the one
// time.Since reads) and an add: on Linux/amd64 about 40 instructions in the
// vDSO, against some 110 for time.Since(start) with its checks and
// conversions.
type Monotonic struct {
	base int64 // wall time at creation (Unix ns) minus the monotonic reading then
}

// NewMonotonic returns a Monotonic anchored at the current wall time.
func NewMonotonic() *Monotonic {
	mono := nanotime()
	return &Monotonic{base: time.Now().UnixNano() - mono}
}

// UnixNano implements Clock.
func (m *Monotonic) UnixNano() int64 { return m.base + nanotime() }

// nanotime is the runtime's monotonic clock, in ns since an arbitrary
// origin: what time.Now's monotonic reading and time.Since use. The runtime
// keeps it reachable by linkname for packages outside the standard library.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// cacheLine is the padding unit that keeps the coarse reading, which every
// decision loads, off the cache line of anything written more often.
const cacheLine = 64

// Coarse caches a reading of a precise clock that one goroutine refreshes
// every Resolution. A reading lags the precise clock by at most the gap
// between two refreshes, Resolution plus the refresher's scheduling delay
// (the time between its tick and its store); it never goes backwards.
// Stop ends the goroutine; UnixNano then reads the precise clock itself,
// so that time keeps moving for whoever still decides (a stopped engine's
// RetryAfter must still come true).
type Coarse struct {
	_    [cacheLine]byte
	now  atomic.Int64 // the reading, or coarseStopped once Stop has run
	_    [cacheLine - 8]byte
	src  Clock
	res  time.Duration
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// coarseStopped is Coarse.now after Stop: no reading is math.MinInt64 (the
// engine refuses every time before 1970 anyway), so UnixNano tells a
// stopped clock from a running one by the value it loads already.
const coarseStopped = math.MinInt64

// NewCoarse starts a coarse clock over a Monotonic that refreshes every
// res (> 0).
func NewCoarse(res time.Duration) *Coarse {
	c := newCoarse(NewMonotonic(), res)
	go c.run()
	return c
}

// NewCoarseDriven returns a coarse clock over src that refreshes only when
// Refresh is called, with no goroutine: tests drive the gap between two
// refreshes, the coarse clock's error, by hand.
func NewCoarseDriven(src Clock, res time.Duration) *Coarse {
	c := newCoarse(src, res)
	close(c.done)
	return c
}

func newCoarse(src Clock, res time.Duration) *Coarse {
	c := &Coarse{src: src, res: res, stop: make(chan struct{}), done: make(chan struct{})}
	c.now.Store(src.UnixNano())
	return c
}

func (c *Coarse) run() {
	defer close(c.done)
	t := time.NewTicker(c.res)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.now.Store(c.src.UnixNano())
		}
	}
}

// UnixNano implements Clock with one atomic load while the clock runs.
func (c *Coarse) UnixNano() int64 {
	if v := c.now.Load(); v != coarseStopped {
		return v
	}
	return c.src.UnixNano() // stopped: the precise clock, never behind the last reading
}

// Refresh stores a new reading of the precise clock, as the refresher does
// at each tick. After Stop it does nothing.
func (c *Coarse) Refresh() {
	for {
		v := c.now.Load()
		if v == coarseStopped || c.now.CompareAndSwap(v, c.src.UnixNano()) {
			return
		}
	}
}

// Resolution is the refresh period.
func (c *Coarse) Resolution() time.Duration { return c.res }

// Stop ends the refresher and waits for it to exit; from then on UnixNano
// reads the precise clock. It is idempotent. The refresher's last store
// happens before done is closed, so no reading overwrites coarseStopped.
func (c *Coarse) Stop() {
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		c.now.Store(coarseStopped)
	})
	<-c.done
}

// Manual is a clock that only moves when told to. It is safe for concurrent
// use. Its waits (After) end when Set or Advance moves it to or past their
// end, never by themselves.
type Manual struct {
	ns atomic.Int64

	mu    sync.Mutex    // guards waits
	waits []*manualWait // pending After calls, unordered
}

// manualWait is one pending After.
type manualWait struct {
	at int64 // fires once the clock reads ≥ at
	ch chan struct{}
}

// NewManual returns a Manual clock reading t. A t outside 1970 … 2262
// reads as −1, which the engine refuses (see UnixNano).
func NewManual(t time.Time) *Manual {
	m := &Manual{}
	m.ns.Store(UnixNano(t))
	return m
}

// UnixNano implements Clock.
func (m *Manual) UnixNano() int64 { return m.ns.Load() }

// Set moves the clock to t (−1 when t is outside 1970 … 2262), and ends
// every wait whose end it reaches.
func (m *Manual) Set(t time.Time) {
	m.ns.Store(UnixNano(t))
	m.fire()
}

// Advance moves the clock by d, and ends every wait whose end it reaches.
func (m *Manual) Advance(d time.Duration) {
	m.ns.Add(int64(d))
	m.fire()
}

// After returns a channel that is closed once the clock reads at least its
// reading at the call plus d (at once for d ≤ 0), and a function that
// releases the wait early; stop is idempotent. It is engine.WaitClock's
// method. A wait registered while another goroutine moves
// the clock is not missed: After reads the clock under mu, and a move
// stores the new reading before it scans the waits under mu, so either
// After sees the new reading or the scan sees the wait.
func (m *Manual) After(d time.Duration) (<-chan struct{}, func()) {
	w := &manualWait{ch: make(chan struct{})}
	m.mu.Lock()
	switch now := m.ns.Load(); {
	case d <= 0:
		close(w.ch)
	case now > math.MaxInt64-int64(d):
		w.at = math.MaxInt64 // past int64 time: reached only by a Set there
		m.waits = append(m.waits, w)
	default:
		w.at = now + int64(d)
		m.waits = append(m.waits, w)
	}
	m.mu.Unlock()
	return w.ch, func() { m.stop(w) }
}

// Waits returns the number of pending waits (After calls neither ended nor
// stopped): a test moves the clock once a waiter is known to be asleep.
func (m *Manual) Waits() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waits)
}

// fire ends every wait whose end the clock has reached.
func (m *Manual) fire() {
	m.mu.Lock()
	now := m.ns.Load()
	kept := m.waits[:0]
	for _, w := range m.waits {
		if now >= w.at {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	clear(m.waits[len(kept):])
	m.waits = kept
	m.mu.Unlock()
}

// stop removes w if it is still pending.
func (m *Manual) stop(w *manualWait) {
	m.mu.Lock()
	for i, x := range m.waits {
		if x == w {
			m.waits = slices.Delete(m.waits, i, i+1) // clears the freed element
			break
		}
	}
	m.mu.Unlock()
}
