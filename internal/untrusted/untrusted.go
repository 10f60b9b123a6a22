// Package untrusted formats text that came from a client (a header, a
// metadata value, a peer address) for an error message.
package untrusted

import "strings"

// Quote bounds s to 64 bytes (then "…") and quotes it, with control
// characters replaced by '?', so that an error message cannot be made
// long or be made to span lines by a client.
func Quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return "\"" + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s) + "\""
}
