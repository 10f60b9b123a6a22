package engine_test

// Tests written by an adversarial review of the engine that had only the
// public API and the documented promises: ADV-n tests reproduce the defects
// it found (each failed before its fix), "Held" tests the attacks that did
// not break it.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// ADV-4. Decision.RetryAfter is documented as "the least wait after which
// this same request fits if no other traffic arrives for the key". For a
// request whose now is older than the key's newest sub-window (clamped to
// that sub-window's start), RetryAfter is measured from the clamped instant,
// not from now: retrying at now+RetryAfter is refused again, for every
// algorithm. (The test's own reference in reference_test.go makes the same
// choice, so the suite cannot see it.)
func TestAdvRetryAfterOfClampedRequestIsTooShort(t *testing.T) {
	base := time.Unix(1_700_000_000, 0) // on every grid used here
	for _, alg := range []engine.Algorithm{engine.SlidingWindow, engine.SlidingWindowStrict, engine.FixedWindow, engine.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEngine(t, engine.Config{Limit: 1, Window: time.Second, SubWindows: 10, Algorithm: alg, DisableEviction: true})
			require.True(t, e.AllowAt("k", 1, base.Add(1050*time.Millisecond)).Allowed)
			now := base.Add(400 * time.Millisecond) // a late, out-of-order arrival
			d := e.AllowAt("k", 1, now)
			require.False(t, d.Allowed)
			require.NotEqual(t, engine.Never, d.RetryAfter)
			retry := e.AllowAt("k", 1, now.Add(d.RetryAfter))
			require.True(t, retry.Allowed, "denied at now=%v with RetryAfter %v; retrying at now+RetryAfter is refused again: %+v",
				now.Sub(base), d.RetryAfter, retry)
		})
	}
}
