package redisstore

import (
	"strings"
)

// Key returns the Redis key holding user key k's state: the prefix, the
// escaped key inside one hash tag, and the geometry,
//
//	<prefix>{<escaped k>}:w<sub-window width in µs>n<N>
//
// for example "ringlimit:{tenant-7}:w100000n10" for a 1 s window in 10
// sub-windows (FixedWindow: N = 0 and the width is the window). Escaping
// maps '\' to "\\", '{' to "\(" and '}' to "\)", and the empty key to "\e"
// (Redis Cluster ignores an empty tag), so the tag always ends at the
// closing brace added here and is never empty, distinct user keys stay
// distinct, and the geometry, outside the tag, never moves the key to
// another Cluster slot.
//
// The geometry in the name means that limiters whose sub-windows differ
// never read each other's counters: a deploy that changes Window,
// SubWindows or moves to or from FixedWindow starts every key afresh in a
// new Redis key, and the old keys expire one Window plus one sub-window
// after their last write. SlidingWindow and SlidingWindowStrict with the
// same Window and N share keys on purpose: they store the same counts
// (units per sub-window) and differ only in how they read them. The limit
// is not in the name: a limit change (Config.Limit, KeyLimit) keeps the
// counts.
//
// For a TokenBucket the name is <prefix>{<escaped k>}:tb, with no rate in
// it: a change of Limit, Window or Burst (a deploy, a KeyLimit answer)
// keeps the units the key owes, rounded up (docs/design.md §11a).
func (l *Limiter) Key(k string) string {
	var b strings.Builder
	b.Grow(len(l.opts.prefix) + len(k) + 2 + len(l.geo))
	b.WriteString(l.opts.prefix)
	b.WriteByte('{')
	if k == "" {
		// Redis Cluster ignores an empty tag "{}" and hashes the whole
		// name: the empty key gets a tag of its own. Escaping never
		// writes a '\' followed by 'e', so no other key's tag is "\e".
		b.WriteString(`\e`)
	}
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '{':
			b.WriteString(`\(`)
		case '}':
			b.WriteString(`\)`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('}')
	b.WriteString(l.geo)
	return b.String()
}
