package accuracy

// event is n units admitted at t (Unix ns).
type event struct{ t, n int64 }

// queue is a FIFO of events with the sum of their units. Expired events are
// dropped from the front; the backing array is compacted once the dead
// prefix is both large and at least half of it, so the work is O(1)
// amortised per event and the memory is bounded by the live events.
type queue struct {
	q    []event
	head int
	sum  int64
}

func (f *queue) push(e event) {
	if f.head > 1024 && f.head*2 > len(f.q) {
		f.q = f.q[:copy(f.q, f.q[f.head:])]
		f.head = 0
	}
	f.q = append(f.q, e)
	f.sum += e.n
}

// expire drops the events at or before cut: the window (cut, t] excludes
// them.
func (f *queue) expire(cut int64) {
	for f.head < len(f.q) && f.q[f.head].t <= cut {
		f.sum -= f.q[f.head].n
		f.head++
	}
}

// ExactLog is the lab's exact reference: a sliding log of one key. An event
// at s counts at t iff t−W < s ≤ t, and n units are admitted at t iff the
// units the log has itself admitted in (t−W, t], plus n, are at most the
// limit. It keeps only its own admissions, so its state never depends on
// what an engine decided. Times must not decrease.
type ExactLog struct {
	limit, window int64
	live          queue
}

// NewExactLog returns an empty log admitting limit units per window ns.
func NewExactLog(limit, window int64) *ExactLog {
	return &ExactLog{limit: limit, window: window}
}

// Allow decides n units at t and records them if admitted. n ≤ 0 is
// refused and records nothing (the lab never sends it).
func (l *ExactLog) Allow(t, n int64) bool {
	if n <= 0 {
		return false
	}
	l.live.expire(t - l.window)
	if l.live.sum+n > l.limit {
		return false
	}
	l.live.push(event{t, n})
	return true
}

// Count returns the units admitted in (t−W, t], for t no earlier than the
// last call's.
func (l *ExactLog) Count(t int64) int64 {
	l.live.expire(t - l.window)
	return l.live.sum
}

// WindowMax tracks, over a stream of admitted events with non-decreasing
// times, the most units inside any window (t−W, t]: two pointers over the
// events, the back one advanced past those that have left the window. Its
// zero value needs Window set.
type WindowMax struct {
	Window int64
	live   queue
	max    int64
}

// Count returns the units in (t−W, t].
func (m *WindowMax) Count(t int64) int64 {
	m.live.expire(t - m.Window)
	return m.live.sum
}

// Add records n units at t and returns the units now in (t−W, t].
func (m *WindowMax) Add(t, n int64) int64 {
	m.live.expire(t - m.Window)
	m.live.push(event{t, n})
	m.max = max(m.max, m.live.sum)
	return m.live.sum
}

// Max returns the most units seen in one window so far.
func (m *WindowMax) Max() int64 { return m.max }
