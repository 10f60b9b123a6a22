package redisstore

import (
	"fmt"
	"runtime"
	"time"
)

// DefaultLinger is how long a sender gathers calls before a round trip
// when WithLinger is not given.
const DefaultLinger = 50 * time.Microsecond

// maxLinger bounds WithLinger.
const maxLinger = time.Millisecond

// WithLinger sets how long, at most, a sender waits for more calls before
// its next round trip, 0 ≤ d ≤ 1ms (0: never; the default is
// DefaultLinger). A sender waits only when its previous round trip carried
// several calls and fewer are queued now: a lone caller never waits, and a
// replica with a few concurrent callers sends them as one pipeline rather
// than several round trips, which costs Redis less per decision. The wait
// ends as soon as as many calls are queued as the last round trip carried.
func WithLinger(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > maxLinger {
			return fmt.Errorf("redisstore: WithLinger(%v): want 0 ≤ d ≤ %v", d, maxLinger)
		}
		o.linger, o.lingerSet = d, true
		return nil
	}
}

// shouldGather reports whether a sender whose previous round trip sent
// answered calls gathers before its next: it did send several (their
// callers, under a steady load, come back within microseconds; a lone
// caller never waits), and fewer are queued than that. b.mu is held.
func (b *batcher) shouldGather(answered int) bool {
	return b.linger > 0 && answered > 1 && len(b.queue) < min(answered, maxBatch)
}

// gather waits until answered calls are queued (or maxBatch), or b.linger
// has passed. It yields rather than sleeps: the callers it waits for were
// just woken by its replies and need the CPU to come back, and a timer
// shorter than the scheduler's tick would fire late. While it gathers,
// callers that would make their own round trip queue instead (do).
func (b *batcher) gather(answered int) {
	want := min(answered, maxBatch)
	start := time.Now()
	for {
		runtime.Gosched()
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n >= want || time.Since(start) >= b.linger {
			return
		}
	}
}
