package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/redisstore"
)

// tierOf is the example's tenant directory: a real server would look the
// tenant up after authenticating it.
var tierOf = map[string]string{"acme": "pro", "globex": "pro"}

// app is the example's handler and what must be released with it.
type app struct {
	handler http.Handler
	m       *httplimit.Middleware
	close   func() error
}

// Keys are "<tier>\x00<tenant>" on the API and "ip\x00<addr>" elsewhere:
// the part before "\x00" picks the limit (httplimit.Tenant).
var (
	tenantKey = httplimit.KeyByHeader("X-Tenant", httplimit.MissingReject)
	apiKey    = httplimit.Compose(httplimit.KeyFunc(tier), tenantKey)
	ipKey     = httplimit.Compose(httplimit.KeyFunc(func(*http.Request) (string, error) { return "ip", nil }), httplimit.KeyByIP(64))
	routeKey  = httplimit.KeyFunc(func(r *http.Request) (string, error) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			return apiKey.Of(r)
		}
		return ipKey.Of(r)
	})
)

func tier(r *http.Request) (string, error) {
	t, err := tenantKey.Of(r)
	if err != nil {
		return "", err
	}
	if tr, ok := tierOf[t]; ok {
		return tr, nil
	}
	return "free", nil
}

// newLocalApp limits in process: one engine, whose per-key limits come
// from a hot-swappable Tiers table (the "ip" prefix gets the engine's
// Limit). clk is nil for the real clock.
func newLocalApp(l limits, clk engine.Clock) (*app, error) {
	tiers, err := httplimit.NewTiers(0, map[string]int64{"free": l.Free, "pro": l.Pro})
	if err != nil {
		return nil, usageError{err}
	}
	e, err := engine.New(engine.Config{Limit: l.PerIP, Window: l.Window, KeyLimit: tiers.KeyLimit, Clock: clk})
	if err != nil {
		return nil, usageError{err}
	}
	m, err := newMiddleware(e)
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	admin := func(w http.ResponseWriter, r *http.Request) {
		t := r.URL.Query().Get("tier")
		if t != "free" && t != "pro" {
			http.Error(w, "tier must be free or pro", http.StatusBadRequest)
			return
		}
		n, err := strconv.ParseInt(r.URL.Query().Get("limit"), 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("limit must be an integer in 1 … %d", int64(engine.MaxLimit)), http.StatusBadRequest)
			return
		}
		// Set validates before it stores anything: a refused limit
		// changes nothing.
		if err := tiers.Set(t, n, e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "tier %s: %d per %v\n", t, n, l.Window)
	}
	return &app{handler: routes(m, httplimit.MetricsHandler(m, e), admin), m: m, close: e.Close}, nil
}

// newRedisApp limits through Redis: every instance built on the same
// server and prefix shares the limits. As in the in-process app, one
// limiter serves every policy: its KeyLimit is a Tiers table, which
// redisstore asks on every decision ("ip" gets Config.Limit, the per-IP
// limit). Before it returns it checks, with the limiter's Ping, that Redis
// can run the limiter's script (a PING would pass a replica or a full
// server). It owns rdb: it closes it on failure, and app.close closes it.
func newRedisApp(ctx context.Context, rdb redis.UniversalClient, prefix string, l limits) (*app, error) {
	tiers, err := httplimit.NewTiers(0, map[string]int64{"free": l.Free, "pro": l.Pro})
	if err != nil {
		_ = rdb.Close()
		return nil, usageError{err}
	}
	cfg := engine.Config{Limit: l.PerIP, Window: l.Window, KeyLimit: tiers.KeyLimit}
	rl, err := redisstore.New(rdb, cfg, redisstore.WithPrefix(prefix))
	if err != nil {
		_ = rdb.Close()
		return nil, usageError{err}
	}
	closeAll := func() error {
		_ = rl.Close()
		return rdb.Close()
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rl.Ping(pctx); err != nil {
		_ = closeAll()
		return nil, fmt.Errorf("redis: %w", err)
	}
	m, err := newMiddleware(rl)
	if err != nil {
		_ = closeAll()
		return nil, err
	}
	admin := func(w http.ResponseWriter, _ *http.Request) {
		// A swap here would change one instance's table and not the
		// others'; restart every instance with new -free and -pro.
		http.Error(w, "tier swap is not available with -redis: restart every instance with new -free / -pro", http.StatusNotImplemented)
	}
	return &app{handler: routes(m, httplimit.MetricsHandler(m, nil), admin), m: m, close: closeAll}, nil
}

func newMiddleware(l any) (*httplimit.Middleware, error) {
	return httplimit.NewMiddleware(l,
		httplimit.WithKey(routeKey),
		httplimit.WithExempt(func(r *http.Request) bool { return r.URL.Path == "/healthz" || r.URL.Path == "/metrics" }),
	)
}

// routes are the same in both modes.
func routes(m *httplimit.Middleware, metrics http.Handler, admin http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	mux.Handle("GET /api/hello", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, _ := tier(r)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8") // the tenant is echoed: never sniff it as HTML
		fmt.Fprintf(w, "hello %s (tier %s)\n", r.Header.Get("X-Tenant"), t)
	})))
	mux.Handle("GET /healthz", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})))
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("POST /admin/tier", admin)
	return mux
}
