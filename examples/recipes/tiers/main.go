// Command tiers is a recipe of docs/recipes.md: per-tenant limits by tier
// (free, pro), held across every replica of a service through Redis.
//
//	go run ./tiers -redis 127.0.0.1:6379 -listen 127.0.0.1:8080   # start two or more replicas
//	curl -i -H 'X-Tenant: acme' http://127.0.0.1:8080/             # acme is pro
//	curl -i -H 'X-Tenant: bob'  http://127.0.0.1:8080/             # anyone else is free
//
// The key of a request is "<tier>\x00<tenant>": the tier, before the
// "\x00", picks the limit (httplimit.Tiers), and each tenant counts in a
// window of its own. redisstore asks Config.KeyLimit on every decision, so
// every replica applies the limit of the key's tier to the count they
// share in Redis.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore"
)

// tierOf is the tenant directory. A real service looks the tenant up after
// it has authenticated it: the header is only trusted here for brevity.
var tierOf = map[string]string{"acme": "pro", "globex": "pro"}

// tenant is the request's tenant; tier is its tier, "free" when unknown.
var tenant = httplimit.KeyByHeader("X-Tenant", httplimit.MissingReject)

func tier(r *http.Request) (string, error) {
	t, err := tenant.Of(r)
	if err != nil {
		return "", err
	}
	if tr, ok := tierOf[t]; ok {
		return tr, nil
	}
	return "free", nil
}

// limits per tier, per window.
type limits struct {
	Free, Pro int64
	Window    time.Duration
}

// newHandler builds one replica: a Redis limiter whose per-key limit comes
// from the tier table, and the middleware keyed by tier and tenant. close
// releases the limiter (not rdb).
func newHandler(rdb redis.UniversalClient, l limits) (h http.Handler, close func() error, err error) {
	tiers, err := httplimit.NewTiers(0, map[string]int64{"free": l.Free, "pro": l.Pro})
	if err != nil {
		return nil, nil, err
	}
	rl, err := redisstore.New(rdb, engine.Config{
		Limit:    l.Free, // for a key whose tier is not in the table (none here)
		Window:   l.Window,
		KeyLimit: tiers.KeyLimit, // asked on every decision: "pro\x00acme" → 1000
	})
	if err != nil {
		return nil, nil, err
	}
	m, err := httplimit.NewMiddleware(rl,
		httplimit.WithKey(httplimit.Compose(httplimit.KeyFunc(tier), tenant)),
		httplimit.WithPolicyName("tenant", 0))
	if err != nil {
		_ = rl.Close()
		return nil, nil, err
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, _ := tier(r)
		fmt.Fprintf(w, "hello, tier %s\n", t)
	})
	return m.Handler(hello), rl.Close, nil
}

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	free := flag.Int64("free", 100, "requests per window of a free tenant")
	pro := flag.Int64("pro", 1000, "requests per window of a pro tenant")
	flag.Parse()
	rdb := redis.NewClient(&redis.Options{Addr: *addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 250 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: true})
	defer rdb.Close()
	h, closeLimiter, err := newHandler(rdb, limits{Free: *free, Pro: *pro, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer closeLimiter()
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Printf("listening on %s, limits shared through Redis at %s", *listen, *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
		os.Exit(1)
	}
}
