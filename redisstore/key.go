package redisstore

import (
	"strings"
)

// Key returns the Redis key holding user key k's state: the prefix, the
// escaped key inside one hash tag (one Cluster slot; distinct user keys
// stay distinct), and the geometry,
//
//	<prefix>{<escaped k>}:w<sub-window width in µs>n<N>
//
// for example "ringlimit:{tenant-7}:w100000n10" for a 1 s window in 10
// sub-windows; a TokenBucket's is <prefix>{<escaped k>}:tb. A deploy that
// changes Window, SubWindows or moves to or from FixedWindow starts every
// key afresh; a limit change keeps the counts (a TokenBucket's rate
// change, the units owed). README, "The state and the key" and "What a
// deploy sees", has the escaping and each case.
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
