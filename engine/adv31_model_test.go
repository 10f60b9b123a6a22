package engine_test

// The adversarial review of issue 31 (branch adv31) checks Settle, Charge and
// the self-audit against a model of its own, written from docs/design.md §1
// and §3b and docs/semantics.md only: advModel below. It is independent of
// model_test.go.

import (
	"math"
	"sort"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// advModel is one key of one algorithm, exactly: counts per sub-window for
// the counters (design.md §1: Strict sums e−N … e; Weighted admits iff
// (full + n)·w + old·(w − r) ≤ L·w; Fixed counts floor(t/W)), a multiset of
// timestamps for SlidingLog. The key's time never runs backwards: a decision
// at an older sub-window is made at the start of the newest one (the log: at
// the newest time).
type advModel struct {
	alg    engine.Algorithm
	limit  int64
	window int64
	n      int64 // sub-windows (0 for Fixed and Log)
	w      int64 // sub-window width (Fixed: window)
	counts map[int64]int64
	last   int64 // newest epoch (counters) or time (log) the key has seen
	seen   bool
	stamps []int64 // log: every recorded unit's time
}

func newAdvModel(cfg engine.Config) *advModel {
	m := &advModel{alg: cfg.Algorithm, limit: cfg.Limit, window: int64(cfg.Window), counts: map[int64]int64{}}
	switch cfg.Algorithm {
	case engine.FixedWindow:
		m.w = m.window
	case engine.SlidingLog:
		m.w = 1
	default:
		m.n = int64(cfg.SubWindows)
		if m.n == 0 {
			m.n = engine.DefaultSubWindows
		}
		m.w = m.window / m.n
	}
	return m
}

// eff returns the effective epoch and offset of t (the log: the time, 0),
// and moves the key's time to it (a peek, n = 0, does not: observed, and
// harmless).
func (m *advModel) eff(t int64) (int64, int64) { return m.effMove(t, true) }

func (m *advModel) effMove(t int64, move bool) (int64, int64) {
	if m.alg == engine.SlidingLog {
		if m.seen && t < m.last {
			t = m.last
		}
		if move {
			m.last, m.seen = t, true
		}
		return t, 0
	}
	e, r := t/m.w, t%m.w
	if m.seen && e < m.last {
		e, r = m.last, 0
	}
	if move {
		if !m.seen || e > m.last {
			m.last = e
		}
		m.seen = true
	}
	return e, r
}

func (m *advModel) logCount(t int64) int64 {
	var c int64
	for _, s := range m.stamps {
		if s > t-m.window && s <= t {
			c++
		}
	}
	return c
}

// full and old: the counts a decision at epoch e weighs in full and by
// (w − r)/w (old is 0 but for the weighted counter).
func (m *advModel) fullOld(e int64) (full, old int64) {
	switch m.alg {
	case engine.FixedWindow:
		return m.counts[e], 0
	case engine.SlidingWindowStrict:
		for k := e - m.n; k <= e; k++ {
			full += m.counts[k]
		}
		return full, 0
	default:
		for k := e - m.n + 1; k <= e; k++ {
			full += m.counts[k]
		}
		return full, m.counts[e-m.n]
	}
}

// fitsAt reports whether n units fit at epoch e, offset r (log: time e).
func (m *advModel) fitsAt(e, r, n int64) bool {
	if m.alg == engine.SlidingLog {
		return m.logCount(e)+n <= m.limit
	}
	full, old := m.fullOld(e)
	return (full+n)*m.w+old*(m.w-r) <= m.limit*m.w
}

func (m *advModel) remaining(e, r int64) int64 {
	if m.alg == engine.SlidingLog {
		return max(0, m.limit-m.logCount(e))
	}
	full, old := m.fullOld(e)
	room := m.limit*m.w - full*m.w - old*(m.w-r)
	if room < 0 {
		return 0
	}
	return room / m.w
}

// retryAt is the earliest time at which n units fit with no other traffic,
// from epoch e, offset r.
func (m *advModel) retryAt(e, r, n int64) int64 {
	if m.alg == engine.SlidingLog {
		live := []int64{}
		for _, s := range m.stamps {
			if s > e-m.window && s <= e {
				live = append(live, s)
			}
		}
		sort.Slice(live, func(i, j int) bool { return live[i] < live[j] })
		drop := int64(len(live)) + n - m.limit
		if drop <= 0 {
			return e
		}
		return live[drop-1] + m.window
	}
	for k := e; k <= e+m.n+1; k++ {
		r0 := int64(0)
		if k == e {
			r0 = r
		}
		full, old := m.fullOld(k)
		if old == 0 {
			if full+n <= m.limit {
				return k*m.w + r0
			}
			continue
		}
		if m.limit-full-n < 0 {
			continue
		}
		rmin := m.w - (m.limit-full-n)*m.w/old
		rr := max(rmin, r0)
		if rr < m.w {
			return k*m.w + rr
		}
	}
	panic("advModel: no retry found")
}

// decide is AllowAt / ReserveAt: it returns the Decision and, when admitted
// with n ≥ 1, where the units were recorded.
func (m *advModel) decide(n int64, t int64) (engine.Decision, int64) {
	e, r := m.effMove(t, n != 0)
	d := engine.Decision{Limit: m.limit}
	if n == 0 {
		d.Allowed, d.Remaining = true, m.remaining(e, r)
		return d, 0
	}
	if m.fitsAt(e, r, n) {
		m.record(e, n)
		d.Allowed, d.Remaining = true, m.remaining(e, r)
		return d, e
	}
	d.Remaining = m.remaining(e, r)
	d.RetryAfter = time.Duration(m.retryAt(e, r, n) - t)
	return d, 0
}

func (m *advModel) record(e, n int64) {
	if m.alg == engine.SlidingLog {
		for range n {
			m.stamps = append(m.stamps, e)
		}
		return
	}
	m.counts[e] += n
}

// cancel returns n units recorded at e, under Cancel's rule.
func (m *advModel) cancel(e, n int64) bool {
	if m.alg == engine.SlidingLog {
		if e <= m.last-m.window {
			return false
		}
		left := n
		for i := 0; i < len(m.stamps) && left > 0; {
			if m.stamps[i] == e {
				m.stamps = append(m.stamps[:i], m.stamps[i+1:]...)
				left--
				continue
			}
			i++
		}
		return true
	}
	if m.alg == engine.FixedWindow {
		if e != m.last {
			return false
		}
	} else if e < m.last-m.n {
		return false
	}
	m.counts[e] -= n
	return true
}

// peek is the Decision a one-unit request gets at t, recording nothing.
func (m *advModel) peek(t int64) engine.Decision {
	e, r := m.effMove(t, false)
	d := engine.Decision{Limit: m.limit, Remaining: m.remaining(e, r)}
	if m.fitsAt(e, r, 1) {
		d.Allowed = true
		return d
	}
	rt := m.retryAt(e, r, 1)
	if rt-t < 0 || rt > math.MaxInt64-1 {
		d.RetryAfter = engine.Never
	} else {
		d.RetryAfter = time.Duration(rt - t)
	}
	return d
}

// charge records n units at t whatever the limit, and peeks.
func (m *advModel) charge(n, t int64) engine.Decision {
	if n > 0 {
		e, _ := m.eff(t)
		m.record(e, n)
	}
	return m.peek(t)
}

// settle settles a reservation of n units recorded at e to actual at t.
func (m *advModel) settle(e, n, actual, t int64) engine.Decision {
	switch {
	case actual < n:
		m.cancel(e, n-actual)
	case actual > n:
		e2, _ := m.eff(t)
		m.record(e2, actual-n)
	}
	return m.peek(t)
}

// cancelWould reports whether units recorded at e can still be given back.
func (m *advModel) cancelWould(e int64) bool {
	switch m.alg {
	case engine.SlidingLog:
		return e > m.last-m.window
	case engine.FixedWindow:
		return e == m.last
	}
	return e >= m.last-m.n
}

// logFull reports whether n more units at t would put more than max units
// in the log key's window. A refused charge changes nothing, not even the
// key's time.
func (m *advModel) logFull(n, t, max int64) bool {
	e, _ := m.effMove(t, false)
	return m.logCount(e)+n > max
}

// counterFull reports whether n more units at t would pass MaxLimit in the
// counter key's current sub-window (a newer sub-window starts empty).
func (m *advModel) counterFull(n, t int64) bool {
	e, _ := m.effMove(t, false)
	if m.seen && e > m.last {
		return n > engine.MaxLimit
	}
	return m.counts[e]+n > engine.MaxLimit
}
