package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
func TestAttackOOMPolicies(t *testing.T) {
	rounds := 2
	if longRuns() {
		rounds = 6
	}
	for r := 0; r < rounds; r++ {
		for _, p := range []struct {
			name string
			opt  Option
		}{{"FailOpen", WithPolicy(FailOpen)}, {"FailClosed", WithPolicy(FailClosed)}, {"FallbackLocal", WithFallbackLocal(1)}} {
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
