package adapter

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// Sep joins the parts of a composite key; httplimit.Tiers reads the part
// before the first Sep as the tenant.
const Sep = "\x00"

// CheckKey returns the error of key, a key function's result, after prefix
// ("httplimit: ", "grpclimit: "), or nil if the adapter may pass it to a
// limiter. Both adapters run every key function's result through it: the
// key of a request, and each part a Compose, KeyByRoute or MissingFallback
// builds it from. A key error never falls back to a shared key:
//   - a blank key (empty, or only white space, which KeyByHeader reads as
//     an absent header) would put every client it is returned for in one
//     bucket, where one of them could exhaust everybody's limit;
//   - a key above MaxKeyBytes is refused, never cut (see MaxKeyBytes).
//
// It allocates only to refuse.
func CheckKey(prefix, key string) error {
	if len(key) > MaxKeyBytes {
		return errors.New(KeyTooLong(prefix, len(key)))
	}
	if strings.TrimSpace(key) == "" {
		return errors.New(prefix + emptyKey)
	}
	return nil
}

// emptyKey is the message of a blank key, after the adapter's prefix.
const emptyKey = "the key is empty (a key function returned \"\" or only white space); refused: an empty key would be one bucket shared by every client it is returned for"

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

// CheckPolicy validates WithPolicyName's name and window.
func CheckPolicy(prefix, name string, window time.Duration) error {
	if _, err := PolicyName(prefix, name); err != nil {
		return err
	}
	if window < 0 {
		return fmt.Errorf("%sWithPolicyName window = %v, want 0 (the limiter's) or > 0", prefix, window)
	}
	return nil
}
