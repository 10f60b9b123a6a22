// Command tiers is a recipe of docs/recipes.md: per-tenant limits by tier
// (free, pro), held across every replica of a service through Redis.
//
//	go run ./tiers -redis 127.0.0.1:6379 -listen 127.0.0.1:8080   # start two or more replicas
//	curl -i -H 'X-Tenant: acme' http://127.0.0.1:8080/             # acme is pro
//	curl -i -H 'X-Tenant: bob'  http://127.0.0.1:8080/             # anyone else is free
//
// At high QPS, -hybrid 5ms decides most requests in process and flushes
// to Redis every 5 ms (redisstore.WithHybrid): each replica admits up to
// -max-local units of a nearly full tenant per flush, and -replicas is the
// number of replicas sharing Redis (an upper estimate, as WithReplicas).
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

// limits per tier, per window, and the hybrid mode's parameters.
type limits struct {
	Free, Pro int64
	Window    time.Duration
	// Hybrid is the flush interval of the hybrid mode; 0 is the plain
	// mode, one script call per request. MaxLocal and Replicas are
	// WithHybrid's maxLocal and WithReplicas's n, used with Hybrid only.
	Hybrid   time.Duration
	MaxLocal int64
	Replicas int
}

// newHandler builds one replica: a Redis limiter whose per-key limit comes
// from the tier table, and the middleware keyed by tier and tenant. The
// caller closes rl (not rdb) when done.
func newHandler(rdb redis.UniversalClient, l limits) (h http.Handler, rl *redisstore.Limiter, err error) {
	tiers, err := httplimit.NewTiers(0, map[string]int64{"free": l.Free, "pro": l.Pro})
	if err != nil {
		return nil, nil, err
	}
	var opts []redisstore.Option
	if l.Hybrid != 0 {
		opts = append(opts, redisstore.WithHybrid(l.Hybrid, l.MaxLocal), redisstore.WithReplicas(l.Replicas))
	}
	rl, err = redisstore.New(rdb, engine.Config{
		Limit:    l.Free, // for a key whose tier is not in the table (none here)
		Window:   l.Window,
		KeyLimit: tiers.KeyLimit, // asked on every decision: "pro\x00acme" → 1000
	}, opts...)
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
	return m.Handler(hello), rl, nil
}

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	free := flag.Int64("free", 100, "requests per window of a free tenant")
	pro := flag.Int64("pro", 1000, "requests per window of a pro tenant")
	hybrid := flag.Duration("hybrid", 0, "flush interval of the hybrid mode, for high QPS (e.g. 5ms; 0: plain mode, a script call per request)")
	maxLocal := flag.Int64("max-local", 10, "with -hybrid: units a replica admits per flush for a nearly full tenant")
	replicas := flag.Int("replicas", redisstore.DefaultReplicas, "with -hybrid: the number of replicas sharing Redis, or more")
	flag.Parse()
	rdb := redis.NewClient(&redis.Options{Addr: *addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 250 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: true})
	defer rdb.Close()
	h, rl, err := newHandler(rdb, limits{Free: *free, Pro: *pro, Window: time.Minute,
		Hybrid: *hybrid, MaxLocal: *maxLocal, Replicas: *replicas})
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Printf("listening on %s, limits shared through Redis at %s", *listen, *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
		os.Exit(1)
	}
}
