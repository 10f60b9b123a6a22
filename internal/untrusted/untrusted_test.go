package untrusted

import (
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `""`},
		{"tenant-7", `"tenant-7"`},
		{"a\nb\x7fc\td", `"a?b?c?d"`},
		{strings.Repeat("x", 65), `"` + strings.Repeat("x", 64) + `…"`},
	} {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}
