package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A full server under maxmemory-policy noeviction answers a script that
// writes with OOM: an error reply, a proof (docs/design.md §10), which
// "the breaker and the failure policy handle" (ErrEvictionPolicy). So
// FailOpen admitting past the limit here is by design. What this guards is
// the count: Stats.Failures is "round trips to Redis that failed, each
// passed to the OnError hook once", and "a decision's round trip whose
// caller's context ended first is counted only if it failed with an error
// reply or a refused connection" — so an OOM that opens the breaker is
// counted, whoever's caller had gone. Under the flood, the breaker opened
// on an OOM (its cause says so) with Failures 0 and no OnError call.
func TestOOMOpeningTheBreakerIsCounted(t *testing.T) {
	rounds := 1
	if longRuns() {
		rounds = 6
	}
	for r := 0; r < rounds; r++ {
		for _, p := range []struct {
			name string
			opt  Option
		}{{"FailOpen", WithFailurePolicy(FailOpen)}, {"FailClosed", WithFailurePolicy(FailClosed)}, {"FallbackLocal", WithFallbackLocal(1)}} {
			t.Run(fmt.Sprint(p.name, "/", r), func(t *testing.T) {
				s := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
				c := redis.NewClient(&redis.Options{Addr: s.Addr()})
				defer c.Close()
				var h hookCounter
				l := fullLimiter(t, c, p.opt, h.opt())
				other := client(t, s)
				junk := strings.Repeat("x", 10000)
				for i := 0; ; i++ {
					err := other.Set(ctx, fmt.Sprint("junk", i), junk, 0).Err()
					if err != nil {
						if !strings.Contains(err.Error(), "OOM") {
							t.Fatal(err)
						}
						break
					}
				}
				ft := flood(l, "k", false, time.Second)
				st := l.Stats()
				d, err := l.AllowN(ctx, "k", 1)
				t.Logf("%s; OnError %d; a patient call after: %+v %v", report(ft, st), h.n.Load(), d, err)
				if st.BreakerOpens > st.Failures || (st.BreakerOpens > 0 && h.n.Load() == 0) {
					t.Errorf("the breaker opened %d times on an error reply, yet Failures %d and OnError calls %d", st.BreakerOpens, st.Failures, h.n.Load())
				}
				_ = errors.Is
			})
		}
	}
}

// fillMemory writes junk through c until Redis answers OOM.
func fillMemory(t *testing.T, c *redis.Client) {
	t.Helper()
	junk := strings.Repeat("x", 10000)
	for i := 0; ; i++ {
		if err := c.Set(ctx, fmt.Sprint("junk", i), junk, 0).Err(); err != nil {
			if !strings.Contains(err.Error(), "OOM") {
				t.Fatal(err)
			}
			return
		}
	}
}

// A full key on a full server (maxmemory, noeviction), called once per
// 20 ms across several sub-windows with patient callers: the key stays
// full, so Redis's answer is a denial that needs no new unit. Logs what the
// limiter answers and whether Stats().Failures counts each OOM that opened
// the breaker ("Failures: round trips to Redis that failed, each passed to
// the OnError hook once"; BreakerOpens: "times the breaker opened after a
// failed round trip").
func TestOOMOnFullKeyIsRedisDenial(t *testing.T) {
	s := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	var h hookCounter
	cfg := engine.Config{Limit: 5, Window: time.Second, SubWindows: 10, Algorithm: engine.SlidingWindowStrict}
	l := mustNew(t, c, cfg, WithFailurePolicy(FailOpen), h.opt())
	if d, err := l.AllowN(ctx, "k", cfg.Limit); err != nil || !d.Allowed {
		t.Fatalf("filling the key: %+v %v", d, err)
	}
	fillMemory(t, client(t, s))
	var admittedByPolicy, redisDenied, redisAdmitted int
	var firstErr error
	for range 100 {
		d, err := l.AllowN(ctx, "k", 1)
		switch {
		case err != nil && d.Allowed:
			admittedByPolicy++
			if firstErr == nil {
				firstErr = err
			}
		case err == nil && d.Allowed:
			redisAdmitted++
		case err == nil:
			redisDenied++
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := l.Stats()
	t.Logf("Redis admitted %d, denied %d; FailOpen admitted %d (first: %v); OnError %d; %+v", redisAdmitted, redisDenied, admittedByPolicy, firstErr, h.n.Load(), st)
	if st.BreakerOpens > st.Failures {
		t.Errorf("BreakerOpens %d > Failures %d: a breaker opening on a failed round trip not counted in Failures", st.BreakerOpens, st.Failures)
	}
}
