package engine_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// checkDecision checks what a single Decision must say on its own.
func (s *stressRun) checkDecision(key string, n int64, d engine.Decision) {
	switch {
	case d.Limit < stressLowest || d.Limit > stressLimit:
		s.fail("%s: Limit %d, want %d … %d", key, d.Limit, stressLowest, stressLimit)
	case d.Allowed && d.RetryAfter != 0, d.Remaining < 0 || d.Remaining > d.Limit:
		s.fail("%s n=%d: inconsistent %+v", key, n, d)
	case !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter == engine.Never):
		s.fail("%s n=%d: a denial of a request that fits the limit must say when: %+v", key, n, d)
	}
}

// quiescentCheck runs with no decision in flight: every window holds at
// most the largest limit, and Remaining matches a recount of the records.
func (s *stressRun) quiescentCheck() {
	for k := range stressKeys {
		rs := s.recs[k]
		s.checkWindows(k, rs)
		s.checkRemaining(k, rs)
		// Keep what a later window can still reach.
		horizon := s.epochOf(s.clk.UnixNano()) - s.epochOf(2*s.window+2*s.width) - 2
		if s.alg == engine.SlidingLog {
			horizon = s.clk.UnixNano() - 2*s.window
		}
		s.recs[k] = slices.DeleteFunc(rs, func(r stressRec) bool { return r.hi < horizon })
		from := s.limits[k].sure.Load()
		for _, r := range s.recs[k] {
			from = min(from, r.sure)
		}
		s.limits[k].prune(from)
	}
}

// checkWindows: Strict and Fixed, every window of N+1 epochs (Fixed: one)
// holds ≤ L; Sliding, every N consecutive epochs; the log, every (x−W, x].
// Only records whose effective time is certain are counted.
//
// L is the limit in force where the window's last admission was made.
// Order the admissions by their linearization points (docs/design.md §3,
// §3c): effective epochs never decrease in that order, so the window's last
// admission A is at its newest epoch x, and it counted every other unit of
// the window, all admitted before it (the estimate counts the newest N+1
// epochs in full, Weighted the newest N, Fixed one, the log (x−W, x]; a
// cancelled unit is out of the records and so counts only against A). So
// the window holds at most the limit in force at A's linearization point.
// That point lies after every admission of the window started (they
// precede it), so at or after the latest start, whose sure mark is the
// largest sure m in the window, and before A returned: the limit there is
// one of changes m … A's begun (stressLimits). Which record is A the
// checker does not know, so it takes the most any record at x allows. The
// bound is sound (it only widens the possible limits) and it still catches
// a decision that used a limit read before a lowering that its window's
// other admissions were made under: those started after the lowering was
// sure, and the stale decision returned before the next change began.
func (s *stressRun) checkWindows(k int, rs []stressRec) {
	var pts []stressRec
	for _, r := range rs {
		if r.lo == r.hi {
			pts = append(pts, r)
		}
	}
	slices.SortFunc(pts, func(a, b stressRec) int { return int(min(max(a.lo-b.lo, -1), 1)) })
	span := s.span + 1 // epochs per checked window
	switch s.alg {
	case engine.SlidingWindow:
		span = s.span
	case engine.SlidingLog:
		span = s.window // ns: (x−W, x]
	}
	var sum int64
	j := 0
	for i, p := range pts {
		sum += p.n
		for pts[j].lo <= p.lo-span {
			sum -= pts[j].n
			j++
		}
		if i+1 < len(pts) && pts[i+1].lo == p.lo {
			continue // count the whole epoch first
		}
		if sum > stressLimit {
			s.fail("k%d: %d units in the window ending at %d (span %d), limit %d", k, sum, p.lo, span, stressLimit)
			return
		}
		if sum <= stressLowest {
			continue // within every limit the key ever has
		}
		m := int64(0)
		for _, q := range pts[j : i+1] {
			m = max(m, q.sure)
		}
		allowed := int64(0)
		for _, a := range pts[j : i+1] {
			if a.lo == p.lo && a.begun >= m {
				allowed = max(allowed, s.limits[k].most(m, a.begun))
			}
		}
		if allowed < stressLimit {
			s.stats.belowWindows++
		}
		if sum > allowed {
			var at []string
			for _, q := range pts[j : i+1] {
				at = append(at, fmt.Sprintf("%d@%d changes %d…%d", q.n, q.lo, q.sure, q.begun))
			}
			s.fail("k%d: %d units in the window ending at %d (span %d), where the limit in force was at most %d (changes from %d: %v): %v",
				k, sum, p.lo, span, allowed, m, s.limits[k].at(m), at)
			return
		}
	}
}

// checkRemaining peeks at the clock and recounts the key's window from the
// records: exactly when every record that may be inside is exact, within
// the bounds the uncertain ones allow otherwise.
func (s *stressRun) checkRemaining(k int, rs []stressRec) {
	key := fmt.Sprint("k", k)
	now := s.clk.UnixNano()
	d, eff := s.e.AllowAtTrace(key, 0, time.Unix(0, now))
	if lo, hi := s.epochOf(now), s.hiBound(k); eff < lo || eff > hi {
		s.fail("%s peek at %d: effective %d outside [%d, %d]", key, now, eff, lo, hi)
		return
	}
	// The model recounts the exact records (one epoch each) at the peek's
	// effective time: now, or the start of the key's newest epoch. A record
	// whose epoch is uncertain and may be inside the counted range widens
	// the bound instead.
	first := eff - s.span
	if s.alg == engine.SlidingLog {
		first = eff - s.window + 1
	}
	mk := &modelKey{}
	var unsure int64
	for _, r := range rs {
		switch {
		case r.lo == r.hi:
			mk.log = append(mk.log, modelEvent{t: r.lo * s.model.w, n: r.n})
		case r.hi >= first && r.lo <= eff:
			unsure += r.n
		}
	}
	te := now
	if s.epochOf(now) != eff {
		te = eff * s.model.w
	}
	hiRem := s.model.remaining(mk, te, d.Limit)
	loRem := max(0, hiRem-unsure)
	if d.Remaining < loRem || d.Remaining > hiRem {
		num, den := s.model.estimate(mk, te)
		s.fail("%s at %d (effective %d): Remaining %d, recount says %d … %d (exact estimate %v/%v, uncertain %d, limit %d)",
			key, now, eff, d.Remaining, loRem, hiRem, num, den, unsure, d.Limit)
	}
	if unsure == 0 {
		s.stats.exactChecks++
	} else {
		s.stats.boundedChecks++
	}
}
