package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Style is a set of rate-limit header styles for WithHeaders.
type Style uint8

const (
	// HeadersDraft writes the fields of draft-ietf-httpapi-ratelimit-headers-09
	// (on by default):
	//
	//	RateLimit-Policy: "default";q=<limit>;w=<window seconds>
	//	RateLimit: "default";r=<remaining>;t=<seconds until capacity frees>
	//
	// Both are Structured Field lists of one item, a String policy name
	// with Integer parameters (draft 09, sections 3 and 4: the policy
	// item MUST be a String, q is required, w is optional and a non-zero
	// number of seconds; r is required, t optional delay-seconds). Per
	// its section 6, t on a 429 is the same point in time as Retry-After;
	// the draft lets a sliding-window server choose t freely otherwise. w= is present only with WithPolicy's window.
	// t= is the denial's Retry-After on a 429, and the window (an upper
	// bound) on an admitted request; see WithPolicy.
	HeadersDraft Style = 1 << iota
	// HeadersLegacy writes the de-facto X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset headers (off by
	// default). X-RateLimit-Reset is delta-seconds until capacity frees
	// (the same value as t=), not a Unix time.
	HeadersLegacy
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

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// writeRateHeaders sets the configured rate-limit headers for d. reset is
// the t= / X-RateLimit-Reset value in seconds, or -1 to omit it. Every
// value is built in one stack buffer and converted to one string, and the
// header slices share one backing array: two allocations for any style.
func (m *Middleware) writeRateHeaders(h http.Header, d engine.Decision, reset int64) {
	style := m.cfg.style
	if style == 0 {
		return
	}
	remaining := max(d.Remaining, 0)
	var buf [192]byte
	b := buf[:0]
	var ends [5]int // end offsets of up to 5 values
	n := 0
	mark := func() { ends[n] = len(b); n++ }
	if style&HeadersDraft != 0 {
		b = append(b, '"')
		b = append(b, m.cfg.policyName...)
		b = append(b, `";q=`...)
		b = strconv.AppendInt(b, d.Limit, 10)
		if m.windowSec > 0 {
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, m.windowSec, 10)
		}
		mark()
		b = append(b, '"')
		b = append(b, m.cfg.policyName...)
		b = append(b, `";r=`...)
		b = strconv.AppendInt(b, remaining, 10)
		if reset >= 0 {
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, reset, 10)
		}
		mark()
	}
	if style&HeadersLegacy != 0 {
		b = strconv.AppendInt(b, d.Limit, 10)
		mark()
		b = strconv.AppendInt(b, remaining, 10)
		mark()
		if reset >= 0 {
			b = strconv.AppendInt(b, reset, 10)
			mark()
		}
	}
	s := string(b)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = s[start:ends[i]]
		start = ends[i]
	}
	i := 0
	set := func(k string) { h[k] = vals[i : i+1 : i+1]; i++ }
	if style&HeadersDraft != 0 {
		set(hPolicy)
		set(hRateLimit)
	}
	if style&HeadersLegacy != 0 {
		set(hXLimit)
		set(hXRemaining)
		if reset >= 0 {
			set(hXReset)
		}
	}
}

// setRetryAfter sets Retry-After to d rounded up to whole seconds, at
// least 1, and returns that value.
func setRetryAfter(h http.Header, d time.Duration) int64 {
	s := max(ceilSeconds(d), 1)
	var buf [20]byte
	h[hRetryAfter] = []string{string(strconv.AppendInt(buf[:0], s, 10))}
	return s
}
