package redisstore

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// scriptCalls returns the script calls Redis has run since the last
// CONFIG RESETSTAT (INFO commandstats: EVALSHA and EVAL).
func scriptCalls(tb testing.TB, c *redis.Client) int64 {
	tb.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, m := range regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`).FindAllStringSubmatch(info, -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n
}

// resetCalls loads the script (so that no NOSCRIPT counts) and zeroes the
// server's command statistics.
func resetCalls(tb testing.TB, c *redis.Client) {
	tb.Helper()
	if err := script.Load(ctx, c).Err(); err != nil {
		tb.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
}

// Issue 32, item 2: keys used once cost one script call. 1,000 decisions
// on 1,000 distinct keys made 2,010–2,014 script calls in the hybrid mode
// (the exact first decision, then a pull in the next flush); an exact
// decision brings the key's count back already, so a key with no local
// units is not pulled. Flushes are the test's (every 50 decisions, and
// three at the end), so the verdict does not depend on timing.
func TestHybridColdKeysOneCallEach(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	cfg := engine.Config{Limit: 100, Window: time.Minute}
	for _, hybrid := range []bool{false, true} {
		opts := []Option{WithPrefix("cold" + strconv.FormatBool(hybrid) + ":")}
		if hybrid {
			opts = append(opts, WithHybrid(5*time.Millisecond, 10), withManual())
		}
		l := mustNew(t, c, cfg, opts...)
		resetCalls(t, c)
		for i := range 1000 {
			if d, err := l.AllowN(ctx, "tenant"+strconv.Itoa(i), 1); err != nil || !d.Allowed {
				t.Fatalf("%+v %v", d, err)
			}
			if hybrid && i%50 == 49 {
				l.flushNow()
			}
		}
		if hybrid {
			for range 3 {
				l.flushNow()
			}
			if n := len(l.hyb.keys); n != 0 {
				t.Fatalf("%d keys held after the flushes, want 0 (dropped: their next decision is exact)", n)
			}
		}
		calls := scriptCalls(t, c)
		t.Logf("hybrid %v: %d script calls for 1,000 decisions on 1,000 keys", hybrid, calls)
		if calls > 1000 {
			t.Fatalf("hybrid %v: %d script calls for 1,000 decisions on 1,000 keys, want ≤ 1,000", hybrid, calls)
		}
		if got := storedUnits(t, c, l, "tenant0", "tenant999"); got != 2 {
			t.Fatalf("Redis holds %d units on two of the keys, want 2", got)
		}
	}
}

// For a skewed key distribution (Zipf over 500 keys: a few hot, most
// cold), the hybrid mode makes no more script calls than decisions, which
// is what the plain mode makes; and Redis holds exactly the units
// admitted.
func TestHybridSkewedNoMoreCallsThanPlain(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s)
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute}, WithHybrid(5*time.Millisecond, 10), withManual())
	resetCalls(t, c)
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, 499)
	const decisions = 5000
	var admitted int64
	keys := map[string]bool{}
	for i := range decisions {
		key := "t" + strconv.FormatUint(z.Uint64(), 10)
		keys[key] = true
		d, err := l.AllowN(ctx, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
		if r.IntN(40) == 0 || i == decisions-1 { // a flush every 40 decisions, on average
			l.flushNow()
		}
	}
	l.flushNow()
	calls := scriptCalls(t, c)
	st := l.Stats()
	t.Logf("%d decisions on %d keys: %d script calls (%.3f per decision), %d exact, %d local", decisions, len(keys), calls, float64(calls)/decisions, st.RedisDecisions, st.LocalDecisions)
	if calls > decisions {
		t.Fatalf("%d script calls for %d decisions: more than the plain mode's one per decision", calls, decisions)
	}
	var ks []string
	for k := range keys {
		ks = append(ks, k)
	}
	if got := storedUnits(t, c, l, ks...); got != admitted {
		t.Fatalf("Redis holds %d units, the replica admitted %d", got, admitted)
	}
}
