package redisstore

// A token bucket key whose rate changes (a KeyLimit answer, a deploy that
// changes Limit, Window or Burst) keeps the units it owes, rounded up: the
// change never grants a unit, and a debt is not re-priced at the old rate.
// The rates are per hour so that the real time a test takes refills far
// under one unit. TestTokenBucketScriptRateChange checks the same rule at
// fixed instants against the exact model.

import (
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A bucket of 5 drained at 7 per hour owes 5 units; when its KeyLimit answer
// falls to 1 per hour it still owes 5, now 5 h, and admits nothing more
// within seconds. Keeping the TAT (5/7 h) instead admitted 4 more at once,
// 9 from a bucket of 5.
func TestTokenBucketKeyLimitSlowerRateKeepsDebt(t *testing.T) {
	s := redistest.Start(t)
	var rate atomic.Int64
	rate.Store(7)
	l := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Hour, Burst: 5,
		KeyLimit: func(string) int64 { return rate.Load() }})
	admitted := 0
	for i := range 14 {
		if i == 7 {
			rate.Store(1)
		}
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
		if i == 7 && (d.Allowed || d.RetryAfter < time.Hour-time.Minute || d.RetryAfter > time.Hour) {
			t.Fatalf("first decision at 1/h after 5 units owed: %+v, want a denial of about 1 h", d)
		}
	}
	if admitted != 5 {
		t.Fatalf("a bucket of 5 admitted %d units within seconds, its rate falling from 7/h to 1/h", admitted)
	}
}

// The other way: 5 units owed at 1 per hour are 5/7 h at 7 per hour, so the
// next unit is due 1/7 h after the change (as x/time/rate's SetLimit, which
// keeps the tokens), not the 4 h 25 min that keeping the TAT made it.
func TestTokenBucketKeyLimitFasterRateKeepsDebt(t *testing.T) {
	s := redistest.Start(t)
	var rate atomic.Int64
	rate.Store(1)
	l := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 1, Window: time.Hour, Burst: 5,
		KeyLimit: func(string) int64 { return rate.Load() }})
	if d, err := l.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
		t.Fatalf("drain: %+v %v", d, err)
	}
	rate.Store(7)
	d, err := l.AllowN(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	// Up to a minute of real time may pass between the two calls; the owed
	// units round up, so the wait is at most one unit at the new rate.
	if d.Allowed || d.RetryAfter > time.Hour/7+time.Microsecond || d.RetryAfter < time.Hour/7-time.Minute {
		t.Fatalf("after the rate rose to 7/h with 5 units owed: %+v, want a denial of about %v", d, time.Hour/7)
	}
}

// A deploy is the same change: replicas on the old config (7 per hour,
// bucket of 5) drain the key, and replicas on the new one (1 per hour)
// find 5 units owed.
func TestTokenBucketDeploySlowerRateKeepsDebt(t *testing.T) {
	s := redistest.Start(t)
	old := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Hour, Burst: 5})
	if d, err := old.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
		t.Fatalf("drain: %+v %v", d, err)
	}
	nu := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 1, Window: time.Hour, Burst: 5})
	d, err := nu.AllowN(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.RetryAfter < time.Hour-time.Minute {
		t.Fatalf("a drained bucket of 5 after a deploy slowed its rate to 1/h: %+v, want a denial of about 1 h", d)
	}
}

// A TAT so far ahead (a backward clock step) that (TAT − now)·q_old would
// not be exact in a double is taken as a whole bucket owed: at most Burst
// units are owed under the new rate, whatever the old state said.
func TestTokenBucketScriptRateChangeFarAhead(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const window, burst = time.Millisecond, 5
	h := newTBAt(t, c, 7, burst, window, "far")
	old, _ := h.b.rate(3)                                     // T = 1000/3 µs
	for _, ahead := range []int64{1 << 51, 1<<52/old.q - 1} { // e ≥ 2^52; e < 2^52, owed capped
		raw := "h" + packFloats(t0+ahead, 1, old.q, old.p)
		if err := c.Set(ctx, h.key, raw, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		m := newGCRAModel(7, burst, window)
		m.tat = new(big.Rat).Add(big.NewRat(t0, 1), new(big.Rat).Mul(big.NewRat(burst, 1), m.t))
		wa, wr, wra := m.decide(t0, 1)
		if ga, gr, gra := h.at(t0, 1, 7); ga != wa || gr != wr || gra != wra {
			t.Fatalf("TAT t0+%d µs under 3/ms, now 7/ms: %v %d %v, model (empty bucket) %v %d %v", ahead, ga, gr, gra, wa, wr, wra)
		}
		if got := h.tat(); got.Cmp(m.tat) != 0 {
			t.Fatalf("TAT t0+%d µs: stored %s, want t0 + 5·T = %s", ahead, got.RatString(), m.tat.RatString())
		}
	}
}

// A state of the earlier 25-byte form (tag 'g', no p) is read as an empty
// bucket if its TAT is ahead of now and as a full one otherwise: its rate
// is unknown, and an empty bucket grants nothing.
func TestTokenBucketScriptOlderState(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	const window, burst = time.Millisecond, 5
	h := newTBAt(t, c, 7, burst, window, "older")
	for _, st := range []struct {
		a, b  int64 // TAT = a + b/7 µs
		empty bool
	}{{t0 + 100, 1, true}, {t0, 1, true}, {t0, 0, false}, {t0 - 5, 3, false}} {
		if err := c.Set(ctx, h.key, "g"+packFloats(st.a, st.b, 7), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		m := newGCRAModel(7, burst, window)
		m.tat = big.NewRat(t0, 1)
		if st.empty {
			m.tat.Add(m.tat, new(big.Rat).Mul(big.NewRat(burst, 1), m.t))
		}
		wa, wr, wra := m.decide(t0, 0)
		if ga, gr, gra := h.at(t0, 0, 7); ga != wa || gr != wr || gra != wra {
			t.Fatalf("'g' state TAT %d + %d/7: %v %d %v, model %v %d %v", st.a-t0, st.b, ga, gr, gra, wa, wr, wra)
		}
	}
}

// A deploy that changes only Burst keeps the rate, and so the TAT: 5 units
// owed at 7 per hour stay owed under a bucket of 2, and the next unit is
// due when the debt fits, (5 − 2 + 1)·T = 4/7 h on.
func TestTokenBucketDeploySmallerBurstKeepsDebt(t *testing.T) {
	s := redistest.Start(t)
	old := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Hour, Burst: 5})
	if d, err := old.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
		t.Fatalf("drain: %+v %v", d, err)
	}
	nu := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Hour, Burst: 2})
	d, err := nu.AllowN(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4 * time.Hour / 7; d.Allowed || d.RetryAfter > want+time.Microsecond || d.RetryAfter < want-time.Minute {
		t.Fatalf("5 units owed, Burst now 2: %+v, want a denial of about %v", d, want)
	}
}
