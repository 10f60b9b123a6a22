package adapter

import (
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Sep joins the parts of a composite key; httplimit.Policies reads the part
// before the first Sep as the tenant.
const Sep = "\x00"

// JoinKeys returns the n keys part(0) … part(n−1) joined by Sep, or the
// first error. part does not escape, so a caller's closure stays on its
// stack.
func JoinKeys(n int, part func(i int) (string, error)) (string, error) {
	var b strings.Builder
	for i := range n {
		k, err := part(i)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteString(Sep)
		}
		b.WriteString(k)
	}
	return b.String(), nil
}

// CheckShare validates WithHeadersBelow's share, 0 < share ≤ 1.
func CheckShare(prefix string, share float64) error {
	if !(share > 0 && share <= 1) {
		return fmt.Errorf("%sWithHeadersBelow(%v), want 0 < share ≤ 1", prefix, share)
	}
	return nil
}

// Quiet reports whether WithHeadersBelow(below) leaves the fields out of
// the admitted Decision d: its remaining quota is at least below·Limit.
// below 0 (the default) sends them always.
func Quiet(below float64, d engine.Decision) bool {
	return below > 0 && float64(max(d.Remaining, 0)) >= below*float64(d.Limit)
}

// CheckPolicy validates WithPolicy's name and window.
func CheckPolicy(prefix, name string, window time.Duration) error {
	if _, err := PolicyName(prefix, name); err != nil {
		return err
	}
	if window < 0 {
		return fmt.Errorf("%sWithPolicy window = %v, want 0 (the limiter's) or > 0", prefix, window)
	}
	return nil
}
