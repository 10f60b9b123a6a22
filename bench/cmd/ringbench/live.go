package main

import (
	"fmt"
	"strings"

	"github.com/ringlimit/ringlimit/engine"
)

// liveAudit sets the engine's self-audit (Config.Audit, -live-audit) next
// to ringbench's own offline audit of the same tenants: the engine samples
// tenants by its seeded key hash, ringbench drives exactly those through
// AllowAt at known instants (one worker per tenant) and replays their
// decisions through its auditors. Both judge each decision against the
// units the engine itself admitted in (t−W, t], so on the same traffic
// they must agree to the unit.
type liveAudit struct {
	Share        float64 `json:"share"`
	Tenants      int     `json:"tenants"`
	TrafficShare float64 `json:"traffic_share"`
	// Engine is Engine.Audit(); Offline the auditors' sums over the same
	// tenants, with the same definitions.
	Engine  auditCounts `json:"engine"`
	Offline auditCounts `json:"offline"`
	// Agree: every count below equal, and the engine's audit judged every
	// decision it saw (nothing dropped, skipped or unjudged).
	Agree       bool     `json:"agree"`
	Differences []string `json:"differences"`
}

type auditCounts struct {
	Decisions   int64   `json:"decisions"`
	Admits      int64   `json:"admits"`
	Denies      int64   `json:"denies"`
	FalseAdmits int64   `json:"false_admits"`
	FalseDenies int64   `json:"false_denies"`
	WorstWindow float64 `json:"worst_window"` // most units the engine admitted in one window, as a multiple of the limit
	Unjudged    int64   `json:"unjudged"`
	Skipped     int64   `json:"skipped"`
	Dropped     int64   `json:"dropped"`
}

// liveOnly is the number of audited tenants that only the live audit
// sampled.
func (p *plan) liveOnly() int {
	n := 0
	for _, ae := range p.audited {
		if ae.live && !ae.offline {
			n++
		}
	}
	return n
}

// liveAuditOf compares the engine's report with the auditors of the
// tenants the engine sampled.
func liveAuditOf(o options, p *plan, auditors []*auditor, rep engine.AuditReport) liveAudit {
	la := liveAudit{Share: o.liveAudit, TrafficShare: p.liveShare(o.zipf), Differences: []string{}}
	if o.liveAudit == 0 {
		return la
	}
	la.Engine = auditCounts{
		Decisions: rep.Decisions, Admits: rep.Admits, Denies: rep.Denies,
		FalseAdmits: rep.FalseAdmits, FalseDenies: rep.FalseDenies, WorstWindow: rep.WorstWindow,
		Unjudged: rep.Unjudged, Skipped: rep.Skipped, Dropped: rep.Dropped,
	}
	for slot, a := range auditors {
		if !p.audited[slot].live {
			continue
		}
		la.Tenants++
		off := &la.Offline
		off.Decisions += a.decisions
		off.Admits += a.engineAllowed
		off.Denies += a.decisions - a.engineAllowed
		off.FalseAdmits += a.selfFalseAdmits
		off.FalseDenies += a.selfFalseDenies
		off.WorstWindow = max(off.WorstWindow, a.overshoot())
	}
	la.Differences = compareAudits(la.Engine, la.Offline)
	la.Agree = len(la.Differences) == 0
	return la
}

// compareAudits lists where the engine's audit and the offline one differ.
func compareAudits(live, off auditCounts) []string {
	d := []string{}
	for _, c := range []struct {
		name      string
		live, off int64
	}{
		{"decisions", live.Decisions, off.Decisions}, {"admits", live.Admits, off.Admits}, {"denies", live.Denies, off.Denies},
		{"false admits", live.FalseAdmits, off.FalseAdmits}, {"false denies", live.FalseDenies, off.FalseDenies},
		{"unjudged", live.Unjudged, 0}, {"skipped", live.Skipped, 0}, {"dropped", live.Dropped, 0},
	} {
		if c.live != c.off {
			d = append(d, fmt.Sprintf("%s: engine %d, offline %d", c.name, c.live, c.off))
		}
	}
	if live.WorstWindow != off.WorstWindow {
		d = append(d, fmt.Sprintf("worst window: engine %.4f, offline %.4f", live.WorstWindow, off.WorstWindow))
	}
	return d
}

// writeLive appends the live-audit section of the text report; alg names
// the bounds its figures are measured against.
func writeLive(b *strings.Builder, alg string, la liveAudit) {
	if la.Share == 0 {
		b.WriteString("\nlive audit  off (-live-audit 0)\n")
		return
	}
	fmt.Fprintf(b, "\nlive audit  the engine's own self-audit (Config.Audit = %g), on the %d tenants its key hash sampled (%s of the tenants, so mostly idle ones: %s of the draws), each driven by one worker through AllowAt\n",
		la.Share, la.Tenants, pctf(la.Share), pctf(la.TrafficShare))
	b.WriteString("            measures: each decision against the units the engine itself admitted in (t−W, t], once inside the engine and once offline here; the two rows must agree to the unit\n")
	b.WriteString("            differs from \"audit\": other tenants (sampled by hash, not picked by rank, so few are saturated) and another reference (the engine's own admissions, not an exact log's)\n")
	fmt.Fprintf(b, "            %-8s %12s %12s %12s %12s %12s %12s\n", "", "decisions", "admits", "denies", "false admits", "false denies", "worst window")
	for _, r := range []struct {
		name string
		c    auditCounts
	}{{"engine", la.Engine}, {"offline", la.Offline}} {
		fmt.Fprintf(b, "            %-8s %12s %12s %12s %12s %12s %11.3f×\n", r.name, commas(r.c.Decisions), commas(r.c.Admits), commas(r.c.Denies),
			commas(r.c.FalseAdmits), commas(r.c.FalseDenies), r.c.WorstWindow)
	}
	admits := "strict bound: 0"
	if alg != "strict" {
		admits = boundPhrase(alg) + " in any window, so some are expected"
	}
	fmt.Fprintf(b, "            false admits: admissions that took a window past the limit (%s); false denies: denials that would have fit (no bound: the estimate errs that way too)\n", admits)
	verdict := "within"
	if !withinBoundRatio(alg, la.Engine.WorstWindow) {
		verdict = "EXCEEDED"
	}
	fmt.Fprintf(b, "            worst window %.3f × limit: the most units the engine admitted in one window (%s; %s)\n", la.Engine.WorstWindow, boundPhrase(alg), verdict)
	if la.Agree {
		b.WriteString("            agree: every count equal\n")
		return
	}
	fmt.Fprintf(b, "            DISAGREE: %s\n", strings.Join(la.Differences, "; "))
}

// withinBoundRatio is withinBound for a ratio of units to the limit.
func withinBoundRatio(alg string, r float64) bool {
	switch alg {
	case "strict":
		return r <= 1
	case "sliding":
		return r < 2
	}
	return r <= 2
}
