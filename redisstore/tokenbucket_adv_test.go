package redisstore

// Adversarial review of the token bucket on Redis (issue 28), against the
// public API and redisstore/README.md "The token bucket". Rates are slow
// (per hour) so that the real time the test takes refills under one unit.

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A key drained under 7 per hour with a bucket of 5, whose KeyLimit answer
// then drops to 1 per hour, is admitted 4 more units at once: 9 units within
// a second on a bucket of 5. Under either rate the bound is 5 + ⌊D·L/W⌋ = 5
// for D of a second. Keeping the TAT keeps the time until full (5/7 h), not
// the units owed, and the slower rate's bucket depth (5 h) makes 4 units of
// room out of nothing.
// Contradicts redisstore/README.md "A key whose rate changes keeps its TAT
// (...: the change never grants a unit)" and "a deploy that changes Limit,
// Window or Burst keeps every key's debt"; design.md §11a "never grants it a
// unit"; and the window bound "at most B + ⌊D·L/W⌋ units".
// Severity: false admission.
func TestAdvTokenBucketKeyLimitSlowerRateGrantsUnits(t *testing.T) {
	s := redistest.Start(t)
	var rate atomic.Int64
	rate.Store(7)
	l := mustNew(t, client(t, s), engine.Config{Algorithm: engine.TokenBucket, Limit: 7, Window: time.Hour, Burst: 5,
		KeyLimit: func(string) int64 { return rate.Load() }})
	admitted := 0
	for range 10 {
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("drain: admitted %d, want 5", admitted)
	}
	rate.Store(1)
	for range 10 {
		d, err := l.AllowN(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted > 5 {
		t.Fatalf("a bucket of 5 admitted %d units within seconds after its rate fell from 7/h to 1/h", admitted)
	}
}

// The other way: drained at 1 per hour, then 7 per hour. A debt of 5 units is
// 5/7 h at the new rate, and the next unit is due 1/7 h after (x/time/rate's
// SetLimit keeps the tokens, so 1/7 h); keeping the TAT makes it wait
// 5 h + 1/7 h − 5/7 h ≈ 4.43 h.
// Contradicts design.md §11a "the change can cost the key less than 1 µs of
// refill" and README "keeps every key's debt" (a debt of 5 units becomes one
// of 31). Severity: false denial (wrong RetryAfter).
func TestAdvTokenBucketKeyLimitFasterRateCostsHours(t *testing.T) {
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
	if d.Allowed {
		t.Fatalf("admitted right after a drain: %+v", d)
	}
	if d.RetryAfter > time.Hour/7+time.Minute {
		t.Fatalf("RetryAfter %v after the rate rose to 7/h with 5 units owed; one unit at the new rate is %v", d.RetryAfter, time.Hour/7)
	}
}

// Exact across replicas with n > 1 and odd bursts: 4 limiters × 4
// goroutines asking random sizes admit at most Burst units in total, and
// exactly Burst once single units fill the rest.
// Contradicts, if it fails: README "4 limiters × 4 goroutines on one key
// admit exactly Burst between them".
func TestAdvTokenBucketReplicasMixedN(t *testing.T) {
	s := redistest.Start(t)
	const burst = 97
	cfg := engine.Config{Algorithm: engine.TokenBucket, Limit: 3, Window: 10 * time.Hour, Burst: burst}
	var units atomic.Int64
	var wg sync.WaitGroup
	var ls []*Limiter
	for range 4 {
		ls = append(ls, mustNew(t, client(t, s), cfg))
	}
	for i, l := range ls {
		for g := range 4 {
			wg.Go(func() {
				n := int64((i*4+g)%7 + 1)
				for range 40 {
					d, err := l.AllowN(ctx, "shared", n)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						units.Add(n)
					}
				}
			})
		}
	}
	wg.Wait()
	for {
		d, err := ls[0].AllowN(ctx, "shared", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		units.Add(1)
	}
	if units.Load() != burst {
		t.Fatalf("admitted %d units, want exactly %d", units.Load(), burst)
	}
}

// Contradicts, if it fails: README "The hybrid mode is refused (New returns
// an error naming WithHybrid)" and ErrBucketReserve's doc.
func TestAdvTokenBucketRefusals(t *testing.T) {
	s := redistest.Start(t)
	cfg := engine.Config{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: 3}
	if _, err := New(client(t, s), cfg, WithHybrid(100*time.Millisecond, 1)); err == nil {
		t.Fatal("hybrid accepted")
	}
	l := mustNew(t, client(t, s), cfg)
	if _, err := l.ChargeN(ctx, "k", 1); err == nil {
		t.Fatal("ChargeN accepted")
	}
	if err := l.CanReserve(); err == nil {
		t.Fatal("CanReserve nil")
	}
	for _, n := range []int64{4, 1 << 62, 1<<63 - 1} {
		d, err := l.AllowN(ctx, "k", n)
		if err != nil || d.Allowed || d.RetryAfter != engine.Never || d.Limit != 3 {
			t.Fatalf("n=%d: %+v %v", n, d, err)
		}
	}
}

// The same as a deploy: replicas on the old config (7 per hour, bucket of 5)
// drain the key, replicas on the new one (1 per hour, same Burst) admit 4
// more at once. Contradicts README "a deploy that changes Limit, Window or
// Burst keeps every key's debt". Severity: false admission.
func TestAdvTokenBucketDeploySlowerRateGrantsUnits(t *testing.T) {
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
	if d.Allowed {
		t.Fatalf("a drained bucket of 5 admitted again at once after a deploy slowed its rate: %+v", d)
	}
}

// Contradicts, if it fails: README "The key is <prefix>{<escaped key>}:tb
// ... expires ⌊(TAT − now)/1 ms⌋ + 1 ms after its last admission, when the
// bucket is full again" (Limiter.Key names the key that holds the state),
// so a TTL never ends before the debt is paid.
func TestAdvTokenBucketTTLCoversDebt(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Algorithm: engine.TokenBucket, Limit: 3, Window: 10 * time.Hour, Burst: 4})
	if d, err := l.AllowN(ctx, "k", 4); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	name := l.Key("k")
	if name[len(name)-3:] != ":tb" {
		t.Errorf("Limiter.Key for a bucket: %q, README says <prefix>{<key>}:tb", name)
	}
	n, _ := c.Exists(ctx, name).Result()
	if n != 1 {
		t.Fatalf("Limiter.Key(%q) = %q holds nothing", "k", name)
	}
	pttl, err := c.PTTL(ctx, name).Result()
	if err != nil {
		t.Fatal(err)
	}
	// 4 units at 3 per 10 h: 13 h 20 min until full.
	if want := 4 * 10 * time.Hour / 3; pttl < want-5*time.Second {
		t.Fatalf("PTTL %v, the bucket is full again only after %v", pttl, want)
	}
}
