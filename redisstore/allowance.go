package redisstore

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A hybrid replica's local decisions on a key: the allowance it may admit
// in process, and the Decision it answers.

// DefaultReplicas is the number of replicas a hybrid limiter sizes its
// local allowance for when WithReplicas is not given.
const DefaultReplicas = 16

// maxReplicas bounds WithReplicas.
const maxReplicas = 1 << 16

// WithReplicas tells a hybrid limiter how many replicas (processes, each
// with its own Limiter) share its keys, 1 ≤ n ≤ 65536; the default is
// DefaultReplicas (16). It sizes the local allowance: a replica may hold
// max(maxLocal, ⌊headroom / (3 × n)⌋) units on a key that Redis has not
// confirmed, where headroom is what the key could still take at the
// replica's last observation of it (see WithHybrid). A smaller n than the
// real count loosens the bound (it is stated with n); a larger one makes
// every allowance smaller than needed, so a replica spends its share
// sooner (a refusal with room left, until the next flush). Without
// WithHybrid it has no effect.
func WithReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > maxReplicas {
			return fmt.Errorf("redisstore: WithReplicas(%d): want 1 ≤ n ≤ %d", n, maxReplicas)
		}
		o.replicas = n
		return nil
	}
}

// allowance is what this replica may hold on k unconfirmed (pending +
// batch, F1 in the proof at hybrid): a 1/(3 × replicas) share of the key's
// headroom at its observation, net of this replica's exact decisions that
// the observation may miss, and never less than maxLocal. The share
// shrinks as the key fills; the factor 3 is the 1 + c_i of the bound with
// c_i ≤ 2 (see WithHybrid). h.mu is held.
func (h *hybrid) allowance(k *hkey, limit int64) int64 {
	room := limit - k.est - k.dFlight - k.dDone
	return max(h.maxLocal, room/(3*h.replicas))
}

// local decides n in process for a key with an observation read with its
// limit (Config.Limit, or KeyLimit's answer for it), at now. It
// returns false when the decision must be exact: the window looks full
// and no exact denial of this replica's says for how long (its RetryAfter
// must come from Redis, which alone holds the window's counts). h.mu is
// held.
//
// A local denial is either the window looking full (Remaining < n; its
// RetryAfter is what is left of an exact denial's, a true lower bound:
// counts only grow until then) or this replica's share spent (Remaining
// ≥ n; RetryAfter is one interval, when the next flush confirms the units
// held and renews the share).
func (h *hybrid) local(k *hkey, key string, n, limit int64, now time.Time) (engine.Decision, bool) {
	used := k.est + k.dFlight + k.dDone + k.pending + k.batch
	d := engine.Decision{Limit: limit, Remaining: max(0, limit-used)}
	switch {
	case n < 0 || n > limit:
		d.RetryAfter = engine.Never
	case n == 0:
		d.Allowed = true
	case used+n > limit:
		if k.fullN == 0 || n < k.fullN || !now.Before(k.fullUntil) {
			return d, false
		}
		d.RetryAfter = k.fullUntil.Sub(now)
	default:
		a := h.allowance(k, limit)
		if k.pending+k.batch+n > a {
			d.RetryAfter = h.interval // the share is spent: Remaining ≥ n says so
			break
		}
		k.pending += n
		d.Allowed, d.Remaining = true, d.Remaining-n
		if h.trace != nil {
			h.trace(traceEvent{kind: 'l', key: key, n: n, exec: k.obs, at: time.Now().UnixNano(), allow: a})
		}
	}
	return d, true
}

// denied notes an exact denial of n sent at sent: until sent + RetryAfter
// (Redis ran it after sent), no request of n or more units fits, and a
// local decision that finds the window full says so without a round trip.
// A denial that says Never, or that admits, clears the note. h.mu is held.
func (k *hkey) denied(d engine.Decision, n int64, sent time.Time) {
	switch {
	case d.Allowed || d.RetryAfter <= 0 || d.RetryAfter == engine.Never:
		k.fullN = 0
	default:
		k.fullN, k.fullUntil = n, sent.Add(d.RetryAfter)
	}
}

// adjust turns an exact decision made with a reserve into the caller's:
// Remaining net of the reserve, and RetryAfter one interval rather than
// Never when only the reserve kept a possible request out.
func (h *hybrid) adjust(d engine.Decision, n, reserve int64) engine.Decision {
	if reserve > 0 {
		d.Remaining = max(0, d.Remaining-reserve)
		if !d.Allowed && d.RetryAfter == engine.Never && n > 0 && n <= d.Limit {
			d.RetryAfter = h.interval
		}
	}
	return d
}
