package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/internal/adapter"
)

// Style is a set of rate-limit header styles for WithHeaders.
type Style uint8

const (
	// HeadersDraft writes the fields of draft-ietf-httpapi-ratelimit-headers-09
	// (on by default), one list member per middleware, each added as a
	// field line after those already set:
	//
	//	RateLimit-Policy: "default";q=<limit>;w=<window seconds>
	//	RateLimit: "default";r=<remaining>;t=<seconds until the quota is free>
	//
	// See Middleware for when w= and t= are present and what t= bounds.
	HeadersDraft Style = 1 << iota
	// HeadersLegacy writes the de-facto X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset headers (off by
	// default). X-RateLimit-Reset is delta-seconds (the same value as
	// t=), not a Unix time. They are not lists and describe one policy:
	// with stacked middlewares, the one with the least remaining quota
	// (on a tie, the inner one, which ran last).
	HeadersLegacy
	// HeadersLegacyUnix is HeadersLegacy with X-RateLimit-Reset as the Unix
	// time, in whole seconds of the wall clock, at which the quota is free
	// (now plus the delta HeadersLegacy sends), as go-chi/httprate and
	// GitHub's API send it. It cannot be combined with HeadersLegacy.
	HeadersLegacyUnix
)

// Canonical header keys, so that the middleware can assign into the
// http.Header map directly. Go canonicalises "RateLimit" as "Ratelimit";
// field names are case-insensitive.
const (
	hRateLimit  = "Ratelimit"
	hPolicy     = "Ratelimit-Policy"
	hXLimit     = "X-Ratelimit-Limit"
	hXRemaining = "X-Ratelimit-Remaining"
	hXReset     = "X-Ratelimit-Reset"
	hRetryAfter = "Retry-After"
)

// writeRateHeaders adds the rate-limit fields of policy f for d. reset
// is the t= / X-RateLimit-Reset value in seconds, or −1 to omit it. Unless
// force is set (denials), WithHeadersBelow may skip them. The dynamic
// values are built in one stack buffer and converted to one string, and
// the header slices this middleware creates share one backing array: two
// allocations for any style (RateLimit-Policy comes from the cache).
func (m *Middleware) writeRateHeaders(h http.Header, f *adapter.Fields, d engine.Decision, reset int64, force bool) {
	style := m.cfg.style
	if style == 0 {
		return
	}
	remaining := max(d.Remaining, 0)
	if !force && adapter.Quiet(m.cfg.below, d) {
		return
	}
	pv := f.Value(d.Limit)
	draft := style&HeadersDraft != 0
	legacy := style&(HeadersLegacy|HeadersLegacyUnix) != 0 && legacyWins(h, remaining)

	// The RateLimit member's constant part is at most 2·MaxPolicyName+5
	// bytes (every name byte escaped); three integers and ";t=" fit the
	// rest.
	var buf [2*adapter.MaxPolicyName + 96]byte
	b := buf[:0]
	var ends [3]int // end offsets of the dynamic values, in order
	n := 0
	mark := func() { ends[n] = len(b); n++ }
	if draft {
		b = f.AppendRate(b, remaining, reset)
		mark()
	}
	if legacy {
		b = strconv.AppendInt(b, remaining, 10)
		mark()
		if reset >= 0 {
			if style&HeadersLegacyUnix != 0 {
				b = strconv.AppendInt(b, time.Now().Unix()+reset, 10)
			} else {
				b = strconv.AppendInt(b, reset, 10)
			}
			mark()
		}
	}
	need := n // the dynamic values, and the cached RateLimit-Policy and X-RateLimit-Limit
	if draft {
		need++
	}
	if legacy {
		need++
	}
	if n == 0 {
		return
	}
	s := string(b)
	vals := make([]string, 0, need)
	part := func(i int) string {
		if i == 0 {
			return s[:ends[0]]
		}
		return s[ends[i-1]:ends[i]]
	}
	i := 0
	if draft {
		vals = addField(h, hPolicy, pv.Policy, vals)
		vals = addField(h, hRateLimit, part(i), vals)
		i++
	}
	if legacy {
		vals = setField(h, hXLimit, pv.XLimit, vals)
		vals = setField(h, hXRemaining, part(i), vals)
		i++
		if reset >= 0 {
			setField(h, hXReset, part(i), vals)
		} else {
			delete(h, hXReset) // an outer middleware's reset is not ours
		}
	}
}

// addField appends v to the field k's lines: after those already there
// (a stacked middleware's), or as the first, taking its slice from vals'
// spare capacity, which never grows (vals is made with the exact count).
func addField(h http.Header, k, v string, vals []string) []string {
	if old := h[k]; len(old) > 0 {
		h[k] = append(old, v)
		return vals
	}
	return setField(h, k, v, vals)
}

// setField sets the field k to v alone, its slice taken from vals' spare
// capacity.
func setField(h http.Header, k, v string, vals []string) []string {
	vals = append(vals, v)
	h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	return vals
}

// legacyWins reports whether remaining should replace the X-RateLimit-*
// headers a stacked middleware already set: when there are none, or ours
// has no more remaining quota than theirs.
func legacyWins(h http.Header, remaining int64) bool {
	old := h[hXRemaining]
	if len(old) == 0 {
		return true
	}
	v, err := strconv.ParseInt(old[0], 10, 64)
	return err != nil || remaining <= v
}

// setRetryAfter sets Retry-After to d rounded up to whole seconds, at
// least 1, and returns that value.
func setRetryAfter(h http.Header, d time.Duration) int64 {
	s := adapter.RetrySeconds(d)
	var buf [20]byte
	h[hRetryAfter] = []string{string(strconv.AppendInt(buf[:0], s, 10))}
	return s
}
