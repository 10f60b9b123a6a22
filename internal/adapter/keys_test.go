package adapter

import (
	"strings"
	"testing"
)

// CheckKey refuses blank keys (empty, or only white space, Unicode's
// included) and keys above MaxKeyBytes, and passes every other key as it
// is, a key with spaces around it included; it allocates only to refuse.
func TestCheckKey(t *testing.T) {
	for _, c := range []struct {
		key  string
		want string // a substring of the error; "" for none
	}{
		{"", "the key is empty"},
		{" ", "the key is empty"},
		{" \t\r\n\v\f", "the key is empty"},
		{"\u00a0\u2003", "the key is empty"},
		{strings.Repeat(" ", MaxKeyBytes+1), "above the cap of 256 bytes"},
		{"a", ""},
		{" a ", ""},
		{"\x00", ""}, // Compose's separator alone: two empty parts are caught part by part
		{strings.Repeat("k", MaxKeyBytes), ""},
		{strings.Repeat("k", MaxKeyBytes+1), "above the cap of 256 bytes"},
	} {
		err := CheckKey("x: ", c.key)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckKey(%q) = %v, want nil", c.key, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), "x: ") || !strings.Contains(err.Error(), c.want)):
			t.Errorf("CheckKey(%q) = %v, want an error with %q after the prefix", c.key, err, c.want)
		}
	}
	key := "tenant-7\x00192.0.2.1"
	if a := testing.AllocsPerRun(100, func() { _ = CheckKey("x: ", key) }); a != 0 {
		t.Errorf("CheckKey of a good key allocates %v times", a)
	}
}
