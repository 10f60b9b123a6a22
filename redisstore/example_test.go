package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore"
)

// These examples need a Redis at 127.0.0.1:6379, so they are compiled and
// not run by go test (they have no Output). The recipes' programs of
// docs/recipes.md (examples/recipes) do the same against a redis-server
// their tests start, and check every answer.

func ExampleNew() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	l, err := redisstore.New(rdb, engine.Config{Limit: 100, Window: time.Second})
	if err != nil {
		log.Fatal(err) // a bad field, named with its allowed range
	}
	defer l.Close()
	if err := l.Ping(ctx); err != nil { // New does not talk to Redis
		log.Fatal(err)
	}
	d, err := l.AllowN(ctx, "tenant-42", 1)
	switch {
	case errors.Is(err, redisstore.ErrUnavailable):
		// Redis is down: d is the failure policy's answer (FailClosed: refused)
	case err != nil:
		// ctx ended, or this call got no reply: nothing was admitted
	}
	fmt.Println(d.Allowed, d.Remaining)
}

// Per-tenant limits by tier, the same on every replica: the key is
// "<tier>\x00<tenant>", the tier picks the limit, and redisstore asks
// KeyLimit on every decision.
func ExampleNew_tiers() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	tiers, err := httplimit.NewTiers(0, map[string]int64{"free": 100, "pro": 1000})
	if err != nil {
		log.Fatal(err)
	}
	l, err := redisstore.New(rdb, engine.Config{Limit: 100, Window: time.Minute, KeyLimit: tiers.KeyLimit})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	d, err := l.AllowN(context.Background(), "pro\x00acme", 1)
	fmt.Println(d.Limit, err) // 1000 <nil>
}

// The net/http middleware over Redis, keyed by tier and tenant: every
// replica built on the same Redis shares the counts.
func ExampleNew_httplimit() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	tiers, _ := httplimit.NewTiers(0, map[string]int64{"free": 100, "pro": 1000})
	l, err := redisstore.New(rdb, engine.Config{Limit: 100, Window: time.Minute, KeyLimit: tiers.KeyLimit})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	tenant := httplimit.KeyByHeader("X-Tenant", httplimit.MissingReject)
	tier := httplimit.KeyFunc(func(r *http.Request) (string, error) {
		if t, _ := tenant.Of(r); t == "acme" { // your tenant directory here
			return "pro", nil
		}
		return "free", nil
	})
	m, err := httplimit.NewMiddleware(l, httplimit.WithKey(httplimit.Compose(tier, tenant)), httplimit.WithPolicyName("tenant", 0))
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", m.Handler(hello)))
}

// A successful login forgives the failed attempts, on every replica.
func ExampleLimiter_Reset() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	l, err := redisstore.New(rdb, engine.Config{Limit: 5, Window: 15 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	key := "login\x00alice"
	if d, err := l.AllowN(ctx, key, 1); err != nil || !d.Allowed {
		return // too many attempts (or Redis is down): refuse the login
	}
	passwordRight := true // your check here
	if passwordRight {
		if err := l.Reset(ctx, key); err != nil {
			log.Print(err) // wraps ErrUnavailable: the count was not reset
		}
	}
}
