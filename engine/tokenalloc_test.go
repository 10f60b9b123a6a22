package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// A token-bucket decision on an existing key allocates nothing: admitted
// and refused, through AllowAt, AllowN, Allow and ReserveAt with Cancel,
// and a key's move into a new ring (Carry) aside, which allocates its
// state once per 2^61·gcd(Limit, Window)/Limit ns of the key's time.
func TestTokenBucketAllocatesNothing(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Algorithm: engine.TokenBucket, Limit: 1_000_000_007, Window: time.Second, Burst: 1000, Clock: clk, DisableEviction: true})
	require.True(t, e.AllowAt("key", 1, t0).Allowed) // created
	at := t0
	allocs := testing.AllocsPerRun(200, func() {
		clk.Advance(time.Microsecond)
		at = at.Add(time.Microsecond) // the clock's reading
		if !e.AllowAt("key", 1, at).Allowed || !e.AllowN("key", 1).Allowed || !e.Allow("key") {
			t.Fatal("refused")
		}
		r := e.ReserveAt("key", 2, at)
		if !r.Cancel() {
			t.Fatal("not given back")
		}
	})
	require.Zero(t, allocs, "admitted")
	for e.AllowAt("key", 1, at).Allowed { // at most Burst
	}
	allocs = testing.AllocsPerRun(200, func() {
		if d := e.AllowAt("key", 1, at); d.Allowed || d.RetryAfter <= 0 {
			t.Fatal("admitted")
		}
		if e.Allow("key") || e.AllowN("key", 2).Allowed { // the clock reads t0, older than at: no more room
			t.Fatal("admitted")
		}
	})
	require.Zero(t, allocs, "refused")
}
