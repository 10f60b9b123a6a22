package main

import "github.com/ringlimit/ringlimit/bench/internal/accuracy"

// auditor replays one tenant's decisions, in the order the engine made them,
// through an exact sliding log of the same limit, and measures what the
// engine actually admitted.
//
// The exact log admits n units at t iff the units it has itself admitted in
// (t−W, t] plus n are at most L. A decision is a false allow when the engine
// admitted what the log refuses, a false deny the reverse; the two logs
// diverge once they differ, so these count disagreement with an exact
// limiter fed the same requests, not errors of the engine's own estimate.
//
// The overshoot is the largest number of units the ENGINE admitted in any
// window (t−W, t], over L: at most 1 for strict, below 2 for sliding, at
// most 2 for fixed windows. The warm overshoot is the same over the windows
// that end at least 2W after the tenant's first decision. The difference
// is the sliding estimate's cold start: a key's first burst lands at one
// offset r0 inside its sub-window, and one window later the estimate weighs
// that sub-window by (w−r)/w while the whole burst is still inside the true
// window, so a saturated key admits up to L·(1 + r0/w) in its first
// windows; once its admissions are spread evenly it stays near L.
//
// The self counts judge each decision against the engine's own admissions
// instead, as the engine's self-audit (Config.Audit) does: with C the units
// the ENGINE admitted in (t−W, t], an admission with C + n > L is a self
// false admit, a denial with C + n ≤ L a self false deny. These do not
// diverge, and on the tenants the engine samples they must equal
// Engine.Audit's counts (the live-audit section).
//
// observe must be called with non-decreasing t. Both sides are kept by
// the accuracy lab's exact log and window counter (FIFOs of admitted
// events), so the work is O(1) amortised per decision and the memory is
// bounded by the units admitted in one window.
type auditor struct {
	limit, window int64

	log *accuracy.ExactLog // the exact limiter, fed the same requests
	eng accuracy.WindowMax // what the engine admitted, per window

	decisions, engineAllowed, logAllowed int64
	falseAllows, falseDenies             int64
	selfFalseAdmits, selfFalseDenies     int64 // judged against the engine's own admissions
	maxUnits, maxAt                      int64 // most units the engine admitted in one window, and that window's end
	maxWarm                              int64 // maxUnits over windows ending ≥ first + 2W
	first, lastT                         int64
}

func newAuditor(limit, window int64) *auditor {
	return &auditor{limit: limit, window: window, log: accuracy.NewExactLog(limit, window), eng: accuracy.WindowMax{Window: window}}
}

// observe records that the engine decided allowed for n units at t (Unix ns).
func (a *auditor) observe(t, n int64, allowed bool) {
	if a.decisions == 0 {
		a.first, a.lastT = t, t
	}
	t = max(t, a.lastT) // the contract is non-decreasing; never let the FIFOs go wrong
	a.lastT = t
	a.decisions++
	logOK := a.log.Allow(t, n)
	if logOK {
		a.logAllowed++
	}
	if c := a.eng.Count(t); allowed && c+n > a.limit {
		a.selfFalseAdmits++
	} else if !allowed && c+n <= a.limit {
		a.selfFalseDenies++
	}
	if allowed {
		a.engineAllowed++
		units := a.eng.Add(t, n)
		if units > a.maxUnits {
			a.maxUnits, a.maxAt = units, t
		}
		if units > a.maxWarm && t-a.first >= 2*a.window {
			a.maxWarm = units
		}
	}
	switch {
	case allowed && !logOK:
		a.falseAllows++
	case !allowed && logOK:
		a.falseDenies++
	}
}

// overshoot is maxUnits / limit; warmOvershoot is maxWarm / limit.
func (a *auditor) overshoot() float64     { return float64(a.maxUnits) / float64(a.limit) }
func (a *auditor) warmOvershoot() float64 { return float64(a.maxWarm) / float64(a.limit) }

// boundText states what each algorithm promises for the overshoot.
func boundText(alg string) string {
	switch alg {
	case "strict":
		return "<= 1.0"
	case "sliding":
		return "< 2.0"
	}
	return "<= 2.0" // fixed: two adjacent windows
}

// withinBound checks units admitted in one window against the promise, in
// integers.
func withinBound(alg string, units, limit int64) bool {
	switch alg {
	case "strict":
		return units <= limit
	case "sliding":
		return units < 2*limit
	}
	return units <= 2*limit
}
