package engine_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/stretchr/testify/require"
)

// The model's audit side (model_test.go has the model): what the
// self-audit must report for the decisions, charges and take-backs it is
// fed.

// observe feeds the audit's side one decision the engine made: the model
// logs the admitted units at the time the audit judges them (the effective
// time, or the key's newest judged time if that is later) and judges the
// decision against the exact count there.
func (m *model) observe(key string, n int64, now time.Time, d engine.Decision) {
	if n < 1 || n > d.Limit {
		return // not a window decision
	}
	k := m.key(key)
	m.touch(k, now.UnixNano())
	t := max(m.effective(k, now.UnixNano()), k.judged)
	k.judged = t
	c := m.count(k, t)
	m.rep.Decisions++
	if d.Allowed && k.charged > 0 && k.chargedIn == m.epoch(t) && c+n > d.Limit && c-k.charged+n <= d.Limit {
		// Over the limit only with the charges of its own sub-window,
		// which it may have preceded: Unjudged (auditcharge.go).
		m.rep.Unjudged++
		m.rep.Admits++
		k.log = append(k.log, modelEvent{t: t, n: n})
		return
	}
	m.rep.Judged++
	if !d.Allowed {
		m.rep.Denies++
		if c+n <= d.Limit {
			m.rep.FalseDenies++
		}
		return
	}
	m.rep.Admits++
	if c+n > d.Limit {
		m.rep.FalseAdmits++
	}
	k.log = append(k.log, modelEvent{t: t, n: n})
	switch w := float64(c+n) / float64(d.Limit); {
	case w > m.rep.WorstWindow:
		m.rep.WorstWindow, m.rep.WorstKey = w, key
		m.worst = map[string]bool{key: true}
	case w == m.rep.WorstWindow:
		m.worst[key] = true
	}
}

// observeCharge feeds the audit's side a charge the engine made (ChargeAt,
// or Settle's debt): its units enter the log where the audit places them,
// at the effective time or the key's newest judged time, judged by no one.
func (m *model) observeCharge(key string, n int64, now time.Time) {
	if n < 1 {
		return
	}
	k := m.key(key)
	m.touch(k, now.UnixNano())
	t := max(m.effective(k, now.UnixNano()), k.judged)
	k.judged = t
	k.log = append(k.log, modelEvent{t: t, n: n, debt: true})
	m.rep.Charges++
	if k.charged > 0 && k.chargedIn == m.epoch(t) {
		k.charged += n
	} else {
		k.charged, k.chargedIn = n, m.epoch(t)
	}
}

// unadmit is the audit's side of a Cancel that gave units back: the units
// leave event ev of key's log if it is still inside the window ending at
// the key's newest judged time, else the cancel is an UnadmitMissed.
func (m *model) unadmit(key string, ev int, units int64) {
	k := m.keys[key]
	m.rep.Unadmits++
	if e := &k.log[ev]; e.t > k.judged-m.win {
		e.n -= units
	} else {
		m.rep.UnadmitMissed++
	}
}

// checkAudit compares got with the audit's side. Keys that tie for the
// worst window may be named in either order (the audit replays keys by
// time); what the logs hold now (Keys, Entries) is checked elsewhere.
func (m *model) checkAudit(t *testing.T, got engine.AuditReport) {
	t.Helper()
	require.True(t, m.worst[got.WorstKey] || got.WorstKey == m.rep.WorstKey, "WorstKey %q, want one of %v", got.WorstKey, m.worst)
	got.WorstKey = m.rep.WorstKey
	got.Keys, got.Entries = 0, 0
	require.Equal(t, m.rep, got)
}
