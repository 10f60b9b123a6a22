package redisstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

var evictCfg = engine.Config{Limit: 10, Window: time.Minute}

// New reads maxmemory-policy and warns through OnError when Redis may evict
// the counters; noeviction is silent. Before, nothing looked: under
// allkeys-lru 187–193 of 200 tenants at a limit of 5 were admitted 10,
// with no error anywhere.
func TestEvictionPolicyWarnedAtNew(t *testing.T) {
	for _, tc := range []struct {
		policy string
		warn   bool
	}{
		{"noeviction", false},
		{"allkeys-lru", true},
		{"volatile-lru", true},
		{"volatile-ttl", true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			s := redistest.Start(t, "--maxmemory-policy", tc.policy)
			var hook hookLog
			l := mustNew(t, client(t, s), evictCfg, hook.opt())
			l.waitChecks()
			want := 0
			if tc.warn {
				want = 1
			}
			if got := hook.count(ErrEvictionPolicy); got != want || len(hook.all()) != want {
				t.Fatalf("maxmemory-policy %s: %d ErrEvictionPolicy warnings, OnError got %v; want %d", tc.policy, got, hook.all(), want)
			}
			if tc.warn && !strings.Contains(hook.all()[0].Error(), tc.policy) {
				t.Fatalf("the warning does not name the policy: %v", hook.all()[0])
			}
		})
	}
}

// A server that refuses CONFIG (renamed away, or an ACL user without it)
// is tolerated: decisions work, and OnError hears it once, however many
// checks run.
func TestEvictionPolicyUnreadable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		client func(testing.TB, *redistest.Server) *redis.Client
	}{
		{"renamed", []string{"--rename-command", "CONFIG", ""}, client},
		{"acl", []string{"--user", "limiter", "on", ">pw", "~*", "&*", "+@all", "-config"}, func(t testing.TB, s *redistest.Server) *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "limiter", Password: "pw", MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t, tc.args...)
			var hook hookLog
			l := mustNew(t, tc.client(t, s), evictCfg, hook.opt())
			l.waitChecks()
			l.checkEviction()
			l.checkEviction()
			if d, err := l.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("decision: %+v, %v", d, err)
			}
			if got := hook.count(ErrEvictionUnchecked); got != 1 || len(hook.all()) != 1 {
				t.Fatalf("CONFIG refused, three checks: OnError got %v; want one ErrEvictionUnchecked", hook.all())
			}
		})
	}
}

// The breaker closing after an outage checks again (the server may be
// another one now, or restarted with other settings); so does the first
// decision Redis answers after a check Redis did not answer.
func TestEvictionPolicyRecheckedAfterOutage(t *testing.T) {
	s := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	var hook hookLog
	l := mustNew(t, client(t, s), evictCfg, withManual(), hook.opt())
	l.waitChecks()
	if got := hook.count(ErrEvictionPolicy); got != 1 {
		t.Fatalf("at New: %v", hook.all())
	}
	s.Kill()
	if _, err := l.AllowN(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dead server: %v", err)
	}
	s.Start()
	if !l.br.probeOnce() {
		t.Fatal("the probe did not close the breaker on a live server")
	}
	l.waitChecks()
	if got := hook.count(ErrEvictionPolicy); got != 2 {
		t.Fatalf("after the breaker closed: %d warnings, %v", got, hook.all())
	}

	// Down at New: the check meets no answer; the first decision Redis
	// answers checks again.
	s.Kill()
	var hook2 hookLog
	l2 := mustNew(t, client(t, s), evictCfg, WithBreaker(0, 0), hook2.opt())
	l2.waitChecks()
	if got := hook2.count(ErrEvictionPolicy); got != 0 {
		t.Fatalf("dead at New: %v", hook2.all())
	}
	s.Start()
	if _, err := l2.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	l2.waitChecks()
	if got := hook2.count(ErrEvictionPolicy); got != 1 {
		t.Fatalf("after the first answered decision: %v", hook2.all())
	}
}
