package redisstore

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A key far below its limit is admitted locally up to one allowance per
// interval, max(maxLocal, ⌊headroom / (3 × replicas)⌋), and a denial past
// it says the share is spent: Remaining ≥ n and RetryAfter one interval
// (WithHybrid). With an interval as long as the Window that allowance is
// all a replica takes in a window, far below the limit (found by an
// adversarial pass: the docs said "however hot it is"). One replica, the
// default WithReplicas (16), Limit 100,000, 10,000 units offered; the
// interval is a minute, so no flush runs during the burst however slow the
// machine.
func TestHybridFarBelowLimitOneAllowancePerInterval(t *testing.T) {
	s := redistest.Start(t)
	const limit, offered, replicas = 100_000, 10_000, 16
	l := mustNew(t, client(t, s), engine.Config{Limit: limit, Window: time.Minute}, WithHybrid(time.Minute, 10))
	var admitted, spent int64
	var first engine.Decision
	for i := 0; i < offered; i++ {
		d, err := l.AllowN(ctx, "hot", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		} else if spent++; spent == 1 {
			first = d
		}
	}
	// The first decision is exact (1 unit, headroom limit − 1 after it),
	// then one allowance locally.
	if want := int64(1 + (limit-1)/(3*replicas)); admitted != want {
		t.Errorf("admitted %d of %d, want 1 exact + one allowance = %d", admitted, offered, want)
	}
	if spent > 0 && (first.Remaining < 1 || first.RetryAfter != time.Minute) {
		t.Errorf("first denial %+v, want the share spent: Remaining ≥ 1 and RetryAfter one interval (1m)", first)
	}
}
