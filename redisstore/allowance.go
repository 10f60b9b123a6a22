package redisstore

import (
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// A hybrid replica's local decisions on a key: the allowance it may admit
// in process, and the Decision it answers.

// local decides n in process for a key with an observation. h.mu is held.
func (h *hybrid) local(k *hkey, key string, n int64) engine.Decision {
	limit := h.l.cfg.Limit
	used := k.est + k.dFlight + k.dDone + k.pending + k.batch
	d := engine.Decision{Limit: limit, Remaining: max(0, limit-used)}
	switch {
	case n < 0 || n > limit:
		d.RetryAfter = engine.Never
	case n == 0:
		d.Allowed = true
	case used+n > limit:
		d.RetryAfter = time.Duration(h.l.width) // advisory: the window looks full
	case k.pending+k.batch+n > h.maxLocal:
		d.RetryAfter = h.interval // advisory: the allowance returns with the flush in flight
	default:
		k.pending += n
		d.Allowed, d.Remaining = true, d.Remaining-n
		if h.trace != nil {
			h.trace(traceEvent{kind: 'l', key: key, n: n, exec: k.obs, at: time.Now().UnixNano()})
		}
	}
	return d
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
