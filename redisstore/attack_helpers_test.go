package redisstore

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// attackFull is issue 27's full key: Strict 5 per minute, filled before
// the attack, so that any admission during it is one past the limit.
var attackFull = engine.Config{Limit: 5, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}

// attackLong reports whether the long forms of the attack tests run
// (RINGLIMIT_ATTACK=1).
func longRuns() bool { return os.Getenv("RINGLIMIT_ATTACK") != "" }

// fullLimiter returns a limiter on c with opts whose key "k" is full.
func fullLimiter(t *testing.T, c redis.UniversalClient, opts ...Option) *Limiter {
	t.Helper()
	l := mustNew(t, c, attackFull, opts...)
	// A round trip may get no reply (ErrNoReply, a tiny ReadTimeout) and
	// still be counted: fill until Redis answers, admitted or denied.
	for range 100 {
		if d, err := l.AllowN(ctx, "k", attackFull.Limit); err == nil {
			if d.Remaining != 0 {
				t.Fatalf("filling the key: %+v", d)
			}
			return l
		}
	}
	t.Fatal("filling the key: no reply in 100 tries")
	return nil
}

// report is a flood's outcome in one line, for logs.
func report(ft *floodTally, st Stats) string {
	return fmt.Sprintf("%d calls, %d admitted, %d policy answers, %d callers gone, %d other (first: %v); BreakerOpens %d, Failures %d, FallbackDecisions %d, NoReply %d, CallerGone %d",
		ft.calls.Load(), ft.admitted.Load(), ft.unavailable.Load(), ft.gone.Load(), ft.other.Load(), ft.firstOther.Load(),
		st.BreakerOpens, st.Failures, st.FallbackDecisions, st.NoReply, st.CallerGone)
}

// errorsIs is errors.Is, kept here so the attack files import less.
var errorsIs = errors.Is
